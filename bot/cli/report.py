"""`opsgate report [--since 7d] [--json]`: how approvals are really given, per rule and tool.

Read from the ledger and the audit log (read-only): calls, run without a card, approved,
rejected, expired, escalated, forbidden, time to decision (p50/p90), approvals given under
five seconds after the card, the reject share and the top requesters and approvers. A rule
approved in seconds every time is a rubber stamp; one always rejected, a rule to tighten; one
never rejected, a rule to loosen. `--json` prints one object (`Report.as_json`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from agent_core import ToolCall

from ..policy import Policy
from ..settings import DatabaseURL, load_settings
from ..store import AuditRow, SQLiteStore, StoreError, ToolCallRow, open_store
from ._figures import Report, RuleFigures, figures
from .audit import parse_since

__all__ = ["report_command", "run_report"]


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
