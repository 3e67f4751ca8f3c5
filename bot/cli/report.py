"""`opsgate report [--since 7d] [--json]`: how approvals are really given, per rule and tool.

Read from the ledger and the audit log (read-only): calls, run without a card, approved,
rejected, expired, escalated, forbidden, time to decision (p50/p90), approvals given under
five seconds after the card, the reject share and the top requesters and approvers. A rule
approved in seconds every time is a rubber stamp; one always rejected, a rule to tighten; one
never rejected, a rule to loosen. `--json` prints one object (`Report.as_json`).

The figures of `opsgate report`, from the ledger and the audit log: per rule and tool, how
many calls, how they ended, how long decisions took, and how many approvals came so fast that
nobody can have read the card (`FAST`).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from agent_core import ToolCall

from ..policy import Policy
from ..settings import DatabaseURL, load_settings
from ..store import AuditRow, SQLiteStore, StoreError, ToolCallRow, open_store
from .audit import parse_since

__all__ = [
    "FAST",
    "Report",
    "RuleFigures",
    "figures",
    "report_command",
    "run_report",
]

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


def report_command(*, since: str, as_json: bool) -> int:
    """The command line's entry: `--since`, the database and the policy from the settings."""
    now = datetime.now(UTC)
    try:
        since_at = parse_since(since, now=now)
    except ValueError as exc:
        print(f"opsgate report: {exc}", file=sys.stderr)
        return 2
    settings = load_settings(mode="audit")
    path = settings.opsgate_policy
    policy = Policy.load(path) if path else Policy.default()
    return asyncio.run(
        run_report(
            settings.opsgate_db,
            since=since_at,
            until=now,
            as_json=as_json,
            out=sys.stdout,
            policy=policy,
        )
    )


async def run_report(
    db: Path | DatabaseURL,
    *,
    since: datetime,
    until: datetime,
    as_json: bool,
    out: TextIO,
    policy: Policy | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the report of `db` (a file or a PostgreSQL URL); never changes the database."""
    err = err or sys.stderr
    try:
        calls, audit = await _read(db, since)
    except FileNotFoundError:
        print(f"opsgate report: no database at {str(db)!r} (set OPSGATE_DB)", file=err)
        return 1
    except StoreError as exc:
        print(f"opsgate report: {exc}", file=err)
        return 1
    report = figures(calls, audit, since=since, until=until, rule_of=_rule_of(policy))
    if as_json:
        print(json.dumps(report.as_json(), sort_keys=True), file=out)
    else:
        print("\n".join(table(report)), file=out)
    return 0


async def _read(
    db: Path | DatabaseURL, since: datetime
) -> tuple[list[ToolCallRow], list[AuditRow]]:
    if isinstance(db, DatabaseURL):
        async with open_store(db, migrate=False) as store:
            return await store.calls_since(since), await store.audit_rows(since=since)
    if not await asyncio.to_thread(db.is_file):
        raise FileNotFoundError(db)
    async with SQLiteStore(db) as lite:
        return await lite.calls_since(since), await lite.audit_rows(since=since)


def _rule_of(policy: Policy | None) -> Callable[[ToolCallRow], str | None]:
    """The rule the policy gives a call that ran without a card (None: the default's)."""

    def rule(row: ToolCallRow) -> str | None:
        if policy is None:
            return None
        call = ToolCall(id=row.call_id, name=row.name, arguments=row.arguments)
        try:
            return policy.decide(row.name, call).policy_rule
        except Exception:  # a stored call the policy cannot judge any more
            return None

    return rule


def table(report: Report) -> list[str]:
    """One block per rule and tool, in words."""
    lines = [f"from {report.since:%Y-%m-%d %H:%M} to {report.until:%Y-%m-%d %H:%M} UTC"]
    if not report.rules:
        return [*lines, "no calls"]
    for r in report.rules:
        lines.append(f"{r.rule} ({r.tool}): {r.calls} call(s), {r.without_card} without a card")
        lines.append(
            f"  approved {r.approved}, rejected {r.rejected}{_share(r)}, expired {r.expired}, "
            f"escalated {r.escalated}, forbidden {r.forbidden}"
        )
        if r.decision_seconds_p50 is not None:
            lines.append(
                f"  decision p50 {r.decision_seconds_p50}s, p90 {r.decision_seconds_p90}s; "
                f"{r.fast_approvals} approval(s) under 5s"
            )
        if r.requesters:
            lines.append("  top requesters: " + ", ".join(f"{u} ({n})" for u, n in r.requesters))
        if r.approvers:
            lines.append("  top approvers: " + ", ".join(f"{u} ({n})" for u, n in r.approvers))
    return lines


def _share(r: RuleFigures) -> str:
    decided = r.approved + r.rejected
    return f" ({round(100 * r.rejected / decided)}% of decisions)" if decided else ""
