"""The figures of `opsgate report`, from the ledger and the audit log: per rule and tool, how
many calls, how they ended, how long decisions took, and how many approvals came so fast that
nobody can have read the card (`FAST`)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..store import AuditRow, ToolCallRow

__all__ = ["FAST", "Report", "RuleFigures", "figures"]

FAST = timedelta(seconds=5)
"""An approval given sooner than this after the card is a rubber stamp."""
_APPROVED = frozenset({"approved", "executing", "done", "interrupted"})
DEFAULT_RULE = "default"
"""The rule of a call no `[[tools.<name>.rules]]` entry decided."""


@dataclass(frozen=True, slots=True)
class RuleFigures:
    """One rule's (and tool's) figures; the names are `opsgate report --json`'s."""

    rule: str
    tool: str
    calls: int
    without_card: int
    approved: int
    rejected: int
    expired: int
    escalated: int
    forbidden: int
    decision_seconds_p50: float | None
    decision_seconds_p90: float | None
    fast_approvals: int
    requesters: tuple[tuple[str, int], ...] = ()
    approvers: tuple[tuple[str, int], ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The pinned fields only (the top people are for the table)."""
        return {k: getattr(self, k) for k in self.__slots__ if k not in ("requesters", "approvers")}


@dataclass(frozen=True, slots=True)
class Report:
    since: datetime
    until: datetime
    rules: tuple[RuleFigures, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "rules": [r.as_json() for r in self.rules],
        }


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile (None of nothing)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(share * len(ordered)) - 1)], 3)


def figures(
    calls: Sequence[ToolCallRow],
    audit: Sequence[AuditRow],
    *,
    since: datetime,
    until: datetime,
    rule_of: Callable[[ToolCallRow], str | None] = lambda _: None,
) -> Report:
    """`calls` (the ledger from `since`) grouped by rule and tool. A gated call's rule is the
    one its "gate" audit row names; a call that ran without a card is asked of `rule_of`
    (the policy as it is now), else it is the default's."""
    gate = {
        str(r.details.get("ledger_id")): r.details.get("policy_rule")
        for r in audit
        if r.event == "gate"
    }
    groups: dict[tuple[str, str], list[ToolCallRow]] = defaultdict(list)
    for row in calls:
        if row.created_at > until:
            continue
        rule = gate.get(row.id) if row.needs_approval else rule_of(row)
        groups[(str(rule or DEFAULT_RULE), row.name)].append(row)
    return Report(since, until, tuple(_one(k, v) for k, v in sorted(groups.items())))


def _one(key: tuple[str, str], rows: list[ToolCallRow]) -> RuleFigures:
    gated = [r for r in rows if r.needs_approval]
    forbidden = [r for r in gated if r.card_locked == "forbidden"]
    asked = [r for r in gated if r.card_locked != "forbidden"]
    approved = [r for r in asked if r.status in _APPROVED and r.decided_at is not None]
    rejected = [r for r in asked if r.status == "rejected"]
    seconds = [
        (r.decided_at - r.created_at).total_seconds()
        for r in (*approved, *rejected)
        if r.decided_at is not None
    ]
    fast = [r for r in approved if r.decided_at is not None and r.decided_at - r.created_at < FAST]
    return RuleFigures(
        rule=key[0],
        tool=key[1],
        calls=len(rows),
        without_card=len(rows) - len(gated),
        approved=len(approved),
        rejected=len(rejected),
        expired=sum(1 for r in asked if r.status == "expired"),
        escalated=sum(1 for r in asked if r.escalation_step > 0),
        forbidden=len(forbidden),
        decision_seconds_p50=percentile(seconds, 0.5),
        decision_seconds_p90=percentile(seconds, 0.9),
        fast_approvals=len(fast),
        requesters=_top(r.requested_by for r in rows),
        approvers=_top(a for r in approved for a in r.approvals),
    )


def _top(people: Any, most: int = 3) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = defaultdict(int)
    for person in people:
        if person:
            counts[person] += 1
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:most])
