"""`opsgate report`'s figures from a ledger this test builds through the store, on each
backend: calls per rule and tool, how they ended, time to decision and fast approvals."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path

from bot.cli.report import figures, run_report
from bot.store import Ruling, SQLiteStore, Store

from .helpers import T0, Clock, mention, paused_session

RULE = "tools.restart_service.rules[0]"


async def _gate(store: Store, ledger_id: str, rule: str | None) -> None:
    await store.audit("gate", actor=None, details={"ledger_id": ledger_id, "policy_rule": rule})


async def _build(store: Store, clock: Clock) -> None:
    """Three paused batches of restart_service (rule 0) and drop_cache (no rule), each with
    a held status call that runs without a card:
    1. restart approved after 3 s (fast), drop rejected after 60 s;
    2. restart approved after 100 s by two people, drop escalated then expired;
    3. restart forbidden (rejected at once, its card locked)."""
    restart, drop = [], []
    for n in range(3):
        _, rows = await paused_session(store, thread=f"170000000{n}.000100")
        gated = [r for r in rows if r.needs_approval]
        restart.append(gated[0].id)
        drop.append(gated[1].id)
        await _gate(store, gated[0].id, RULE)
        await _gate(store, gated[1].id, None)
        for i, row in enumerate(gated):
            locked = "forbidden" if n == 2 and i == 0 else None
            await store.set_card(row.id, "C1", f"170000000{n}.00020{i}", locked=locked)
    clock.advance(seconds=3)
    await store.decide(restart[0], "approved", user_id="UBOB")
    await store.decide(restart[2], "rejected", user_id="UBOT")
    clock.advance(seconds=57)
    await store.decide(drop[0], "rejected", user_id="UCAROL")
    row = await store.get_call(drop[1])
    assert row is not None
    assert await store.claim_escalation(row, 1, {"step": 1, "added": ["USECOND"]})
    clock.advance(seconds=40)
    await store.decide(restart[1], "approved", user_id="UBOB", ruling=Ruling(required_approvals=2))
    await store.decide(restart[1], "approved", user_id="UDAN", ruling=Ruling(required_approvals=2))
    await store.set_expiry(drop[1], clock.now)
    await store.set_expiry(drop[2], clock.now)
    clock.advance(seconds=1)
    assert len(await store.expire_due(clock.now)) == 2


async def test_figures_per_rule_and_tool(store: Store, clock: Clock) -> None:
    await _build(store, clock)
    since, until = T0 - timedelta(hours=1), clock.now
    report = figures(
        await store.calls_since(since),
        await store.audit_rows(since=since),
        since=since,
        until=until,
    )
    by_key = {(r.rule, r.tool): r for r in report.rules}
    restart = by_key[(RULE, "restart_service")]
    assert (restart.calls, restart.approved, restart.rejected, restart.forbidden) == (3, 2, 0, 1)
    assert (restart.without_card, restart.expired, restart.escalated) == (0, 0, 0)
    assert restart.decision_seconds_p50 == 3.0 and restart.decision_seconds_p90 == 100.0
    assert restart.fast_approvals == 1
    assert restart.approvers == (("UBOB", 2), ("UDAN", 1))
    drop = by_key[("default", "drop_cache")]
    assert (drop.calls, drop.approved, drop.rejected, drop.expired, drop.escalated) == (
        3,
        0,
        1,
        2,
        1,
    )
    assert drop.decision_seconds_p50 == 60.0 and drop.fast_approvals == 0
    held = by_key[("default", "service_status")]
    assert (held.calls, held.without_card, held.approved) == (3, 3, 0)
    later = figures(await store.calls_since(clock.now), [], since=clock.now, until=clock.now)
    assert later.rules == ()


async def test_report_json_is_one_object(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "opsgate.db"
    async with SQLiteStore(path, clock=clock, person=mention) as store:
        await _build(store, clock)
    out = io.StringIO()
    since = T0 - timedelta(days=7)
    code = await run_report(path, since=since, until=clock.now, as_json=True, out=out)
    assert code == 0
    [line] = out.getvalue().splitlines()
    report = json.loads(line)
    assert set(report) == {"since", "until", "rules"}
    assert report["since"] == since.isoformat()
    first = next(r for r in report["rules"] if r["rule"] == RULE)
    assert set(first) == {
        "rule",
        "tool",
        "calls",
        "without_card",
        "approved",
        "rejected",
        "expired",
        "escalated",
        "forbidden",
        "decision_seconds_p50",
        "decision_seconds_p90",
        "fast_approvals",
    }
    assert first["calls"] == 3 and first["fast_approvals"] == 1
    text = io.StringIO()
    await run_report(path, since=since, until=clock.now, as_json=False, out=text)
    assert "approved 2, rejected 0 (0% of decisions), expired 0, escalated 0, forbidden 1" in (
        text.getvalue()
    )
