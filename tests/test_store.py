"""`bot.store`: each guarantee of issue 3, on a real SQLite file (two stores where it matters)."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import bot.store
from agent_core import (
    AgentRunOptions,
    AgentSession,
    ChatClientAgent,
    ChatMessage,
    Finish,
    FinishReason,
    ResumeError,
    ToolApprovalRequest,
    ToolCall,
    ToolCallAlreadyStarted,
    ToolCallHeld,
    ToolResult,
    call_digest,
    canonical_arguments,
    pending_tool_calls,
    tool,
)
from bot._duration import format_duration
from bot.audit import parse_since, run_audit
from bot.store import (
    INTERRUPTED_MESSAGE,
    NOT_RUN_MESSAGE,
    SCHEMA_VERSION,
    DatabaseLocked,
    SchemaTooNew,
    SQLiteStore,
    StoreError,
    ToolCallRow,
    UnknownCall,
    UnknownSession,
    batch_complete,
)
from tests.support.scripted import ScriptedChatClient, Turn, call, collect, history_problems

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[1]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **span: float) -> None:
        self.now += timedelta(**span)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "opsgate.db"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(db: Path, clock: Clock) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db, clock=clock) as opened:
        yield opened


RESTART = call("call_restart", "restart_service", service="api", force=True)
STATUS = call("call_status", "service_status", service="api")
DROP = call("call_drop", "drop_cache", region="eu")


async def paused_session(
    store: SQLiteStore, *, thread: str = "1700000000.000100", requester: str = "UREQ"
) -> tuple[str, list[ToolCallRow]]:
    """A session whose last turn paused: two gated calls around one held sibling."""
    session = await store.get_or_create_session("T1", "C1", thread)
    await store.set_requester(session.id, requester)
    assert await store.claim(session.id, ["idle"], "running")
    await store.append_messages(session.id, [ChatMessage.user("restart api please")])
    message = ChatMessage.assistant("On it.", (RESTART, STATUS, DROP))
    requests = [
        ToolApprovalRequest(
            c.id,
            c.name,
            c.parsed_arguments(),
            "desc",
            call_digest(c.name, c.parsed_arguments()),
        )
        for c in (RESTART, DROP)
    ]
    held = [ToolCallHeld(STATUS.id, STATUS.name, STATUS.parsed_arguments())]
    await store.record_pause(session.id, message, requests, held)
    return session.id, await store.batch_calls(session.id)


def test_public_api_is_sorted() -> None:
    assert bot.store.__all__ == sorted(bot.store.__all__)


def test_the_store_and_audit_command_never_import_slack() -> None:
    code = (
        "import sys, bot.store, bot.audit; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('slack_sdk', 'slack_bolt')))"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


# -- opening, schema, migrations ------------------------------------------------------------------


async def test_open_creates_versioned_schema_in_wal_mode(db: Path) -> None:
    async with SQLiteStore(db) as store:
        conn = store._connection()
        pragmas = {}
        for name in ("foreign_keys", "busy_timeout", "synchronous"):
            async with conn.execute(f"PRAGMA {name}") as cursor:
                row = await cursor.fetchone()
                assert row is not None
                pragmas[name] = row[0]
    assert pragmas == {"foreign_keys": 1, "busy_timeout": 30_000, "synchronous": 2}
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


async def test_a_database_from_a_newer_version_is_refused_and_left_unchanged(db: Path) -> None:
    raw = sqlite3.connect(db)
    raw.execute("CREATE TABLE future (x)")
    raw.execute("INSERT INTO future VALUES (1)")
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    before = await asyncio.to_thread(db.read_bytes)

    with pytest.raises(SchemaTooNew) as caught:
        async with SQLiteStore(db):
            pytest.fail("a newer schema must not open")

    message = str(caught.value)
    assert str(db) in message
    assert f"version {SCHEMA_VERSION + 1}" in message
    assert f"up to {SCHEMA_VERSION}" in message
    assert isinstance(caught.value, StoreError)
    assert await asyncio.to_thread(db.read_bytes) == before
    assert not await asyncio.to_thread(Path(f"{db}-wal").exists)


async def test_a_file_that_is_not_a_database_is_a_store_error_naming_it(db: Path) -> None:
    await asyncio.to_thread(db.write_bytes, b"not sqlite at all, just some long enough text" * 20)
    with pytest.raises(StoreError, match="not a database") as caught:
        async with SQLiteStore(db):
            pass
    assert str(db) in str(caught.value)


async def test_using_a_store_that_is_not_open_says_so(db: Path) -> None:
    store = SQLiteStore(db)
    with pytest.raises(StoreError, match="not open"):
        await store.get_session("nope")


async def test_two_stores_opening_a_fresh_file_together_both_work(db: Path) -> None:
    async with SQLiteStore(db) as a, SQLiteStore(db) as b:
        one = await a.get_or_create_session("T1", "C1", "1.0")
        assert await b.get_session(one.id) == one


# -- the exclusive lock (one serving process per database) ---------------------------------------


async def test_an_exclusive_store_refuses_a_second_one_until_it_closes(db: Path) -> None:
    async with SQLiteStore(db, exclusive=True) as first:
        session = await first.get_or_create_session("T1", "C1", "1.0")
        with pytest.raises(DatabaseLocked) as caught:
            async with SQLiteStore(db, exclusive=True):
                pytest.fail("a second exclusive store must not open")
        message = str(caught.value)
        assert str(db) in message and f"{db}.lock" in message
        assert "another OpsGate process" in message and "stop it first" in message
        assert f"pid {os.getpid()}" in message
        assert isinstance(caught.value, StoreError)
        async with SQLiteStore(db) as reader:  # readers (opsgate audit) are never refused
            assert await reader.get_session(session.id) == session
        assert await first.get_session(session.id) == session  # the refusal did not disturb it
    async with SQLiteStore(db, exclusive=True) as second:
        assert await second.get_session(session.id) == session
        assert repr(second) == f"SQLiteStore({str(db)!r}, exclusive=True)"


async def test_a_store_that_fails_to_open_releases_its_lock(db: Path) -> None:
    raw = sqlite3.connect(db)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(SchemaTooNew):
        async with SQLiteStore(db, exclusive=True):
            pytest.fail("a newer schema must not open")
    fd = os.open(f"{db}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError if still held
    finally:
        os.close(fd)


_HOLDER = """
import asyncio, sys
from bot.store import SQLiteStore

async def main():
    async with SQLiteStore(sys.argv[1], exclusive=True):
        print("open", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

asyncio.run(main())
"""


async def test_the_lock_holds_across_processes_and_dies_with_its_holder(db: Path) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOLDER,
        str(db),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        assert await asyncio.wait_for(child.stdout.readline(), 30) == b"open\n"
        with pytest.raises(DatabaseLocked, match=f"pid {child.pid}"):
            async with SQLiteStore(db, exclusive=True):
                pytest.fail("the child holds the lock")
    finally:
        child.kill()  # a crash, not a clean close: the kernel must drop the lock anyway
        await asyncio.wait_for(child.wait(), 30)
    async with SQLiteStore(db, exclusive=True) as store:
        assert await store.recover() == []


# -- sessions and run states ----------------------------------------------------------------------


async def test_one_thread_is_one_session(store: SQLiteStore, clock: Clock) -> None:
    first = await store.get_or_create_session("T1", "C1", "1.0")
    clock.advance(seconds=5)
    again = await store.get_or_create_session("T1", "C1", "1.0")
    other = await store.get_or_create_session("T1", "C1", "2.0")
    assert again == first
    assert other.id != first.id
    assert first.state == "idle"
    assert first.created_at == T0
    assert await store.find_session("T1", "C1", "1.0") == first
    assert await store.find_session("T2", "C1", "1.0") is None
    assert await store.get_session("missing") is None


async def test_get_or_create_from_two_stores_at_once_gives_one_session(db: Path) -> None:
    async with SQLiteStore(db) as a, SQLiteStore(db) as b:
        rows = await asyncio.gather(
            *(s.get_or_create_session("T1", "C9", "5.5") for s in (a, b, a, b, a, b))
        )
    assert len({row.id for row in rows}) == 1


async def test_of_n_concurrent_claims_across_two_stores_exactly_one_wins(db: Path) -> None:
    async with SQLiteStore(db) as a, SQLiteStore(db) as b:
        session = await a.get_or_create_session("T1", "C1", "1.0")
        await a.set_state(session.id, "awaiting_approval")
        results = await asyncio.gather(
            *(
                (a if i % 2 else b).claim(session.id, ("awaiting_approval",), "resuming")
                for i in range(20)
            )
        )
        assert results.count(True) == 1
        row = await b.get_session(session.id)
    assert row is not None and row.state == "resuming"


async def test_claim_and_set_state(store: SQLiteStore) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    assert not await store.claim(session.id, ["running"], "idle")
    await store.set_state(session.id, "failed", error="the model endpoint said 500")
    failed = await store.get_session(session.id)
    assert failed is not None and failed.error == "the model endpoint said 500"
    assert await store.claim(session.id, {"idle", "failed"}, "running")
    running = await store.get_session(session.id)
    assert running is not None and (running.state, running.error) == ("running", None)
    await store.set_requester(session.id, "U42")
    assert (await store.get_session(session.id)).requester == "U42"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="unknown run state"):
        await store.set_state(session.id, "sleeping")  # type: ignore[arg-type]
    with pytest.raises(UnknownSession, match="'nope'"):
        await store.claim("nope", ["idle"], "running")
    with pytest.raises(UnknownSession):
        await store.set_state("nope", "idle")
    with pytest.raises(UnknownSession):
        await store.set_requester("nope", "U1")


# -- messages -------------------------------------------------------------------------------------


async def test_messages_round_trip_in_order(store: SQLiteStore) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    history = [
        ChatMessage.user("hi <@U1> & friends", name="alice"),
        ChatMessage.assistant(None, (RESTART, STATUS)),
        ChatMessage.tool("ok", RESTART.id),
        ChatMessage.tool("", STATUS.id),
        ChatMessage.assistant("done ✓"),
    ]
    await store.append_messages(session.id, history[:2])
    await store.append_messages(session.id, [])
    await store.append_messages(session.id, history[2:])
    assert await store.load_messages(session.id) == history
    assert await store.load_messages("unknown") == []


async def test_appending_writes_only_the_new_rows(store: SQLiteStore) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    for i in range(300):
        await store.append_messages(session.id, [ChatMessage.user(f"message {i}")])
    conn = store._connection()
    before = conn.total_changes
    await store.append_messages(session.id, [ChatMessage.user("one more")])
    # One message row, plus the session's `updated_at`: nothing proportional to the history.
    assert conn.total_changes - before == 2
    assert (await store.load_messages(session.id))[-1].content == "one more"


async def test_appending_to_an_unknown_session_fails_and_writes_nothing(
    store: SQLiteStore,
) -> None:
    with pytest.raises(UnknownSession, match="'ghost'"):
        await store.append_messages("ghost", [ChatMessage.user("hello")])
    assert await store.load_messages("ghost") == []


# -- the paused batch -----------------------------------------------------------------------------


async def test_record_pause_writes_message_ledger_state_and_requests_at_once(
    store: SQLiteStore,
) -> None:
    session_id, rows = await paused_session(store)

    history = await store.load_messages(session_id)
    assert [c.id for c in history[-1].tool_calls] == [RESTART.id, STATUS.id, DROP.id]
    assert [r.call_id for r in rows] == [RESTART.id, STATUS.id, DROP.id]
    assert [r.needs_approval for r in rows] == [True, False, True]
    assert {r.status for r in rows} == {"pending"}
    assert len({r.batch_id for r in rows}) == 1 and rows[0].batch_id is not None
    assert len({r.id for r in rows}) == 3
    assert all(r.requested_by == "UREQ" for r in rows)
    restart = rows[0]
    assert restart.arguments == canonical_arguments({"service": "api", "force": True})
    assert restart.arguments_value() == {"force": True, "service": "api"}
    assert restart.digest == call_digest("restart_service", {"service": "api", "force": True})
    assert restart.tool == "restart_service"
    session = await store.get_session(session_id)
    assert session is not None
    assert (session.state, session.batch_id) == ("awaiting_approval", restart.batch_id)
    requests = [a for a in await store.audit_rows() if a.event == "request"]
    assert [(a.call_id, a.actor) for a in requests] == [(RESTART.id, "UREQ"), (DROP.id, "UREQ")]
    assert requests[0].details["ledger_id"] == restart.id
    assert requests[0].details["digest"] == restart.digest
    assert await store.get_call(restart.id) == restart
    assert await store.find_call(session_id, DROP.id) == rows[2]
    assert await store.get_call("nope") is None


async def test_a_pause_that_fails_leaves_nothing_behind(store: SQLiteStore) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    message = ChatMessage.assistant(None, (RESTART, RESTART))
    request = ToolApprovalRequest(RESTART.id, RESTART.name, {}, "d", "x")
    with pytest.raises(StoreError, match="repeats a tool call id"):
        await store.record_pause(session.id, message, [request], [])
    stray = ToolApprovalRequest("call_other", "x", {}, "d", "x")
    with pytest.raises(StoreError, match="call_other"):
        await store.record_pause(session.id, ChatMessage.assistant(None, (STATUS,)), [stray], [])
    assert await store.load_messages(session.id) == []
    assert await store.batch_calls(session.id) == []
    assert (await store.get_session(session.id)).state == "idle"  # type: ignore[union-attr]


async def test_card_and_expiry_are_stored_on_the_row(store: SQLiteStore, clock: Clock) -> None:
    _, rows = await paused_session(store)
    await store.set_card(rows[0].id, "C1", "1700000001.000200")
    await store.set_expiry(rows[0].id, T0 + timedelta(minutes=15))
    row = await store.get_call(rows[0].id)
    assert row is not None
    assert (row.card_channel, row.card_ts) == ("C1", "1700000001.000200")
    assert (row.expires_at, row.ttl) == (T0 + timedelta(minutes=15), "15m")
    assert await store.next_expiry() == T0 + timedelta(minutes=15)
    with pytest.raises(UnknownCall, match="'nope'"):
        await store.set_card("nope", "C1", "1.0")
    with pytest.raises(UnknownCall):
        await store.set_expiry("nope", T0)


# -- decisions ------------------------------------------------------------------------------------


async def test_racing_decisions_on_two_connections_record_exactly_one(
    db: Path, clock: Clock
) -> None:
    async with SQLiteStore(db, clock=clock) as a, SQLiteStore(db, clock=clock) as b:
        _, rows = await paused_session(a)
        for row in (rows[0], rows[2]):
            approve, reject = await asyncio.gather(
                a.decide(row.id, "approved", user_id="UALICE", team_id="T1", rule="ops"),
                b.decide(row.id, "rejected", user_id="UBOB", team_id="T1", reason="not now"),
            )
            assert approve.recorded != reject.recorded
            winner, loser = (approve, reject) if approve.recorded else (reject, approve)
            who = "UALICE" if winner is approve else "UBOB"
            stored = await b.get_call(row.id)
            assert stored is not None
            assert stored.status == winner.row.status
            assert (stored.decided_by, stored.decided_team) == (who, "T1")
            assert loser.row.status == winner.row.status
            assert loser.why is not None
            assert f"already {winner.row.status} by <@{who}>" in loser.why
            assert "2025-03-01 09:00:00 UTC" in loser.why
        audit = [r for r in await a.audit_rows() if r.event in ("decision", "refusal")]
    assert sorted(r.event for r in audit) == ["decision", "decision", "refusal", "refusal"]
    refusal = next(r for r in audit if r.event == "refusal")
    assert refusal.details["why"].startswith("already")
    assert refusal.actor in ("UALICE", "UBOB")


async def test_many_racing_approvers_record_one_decision(db: Path) -> None:
    async with SQLiteStore(db) as a, SQLiteStore(db) as b:
        _, rows = await paused_session(a)
        outcomes = await asyncio.gather(
            *(
                (a if i % 2 else b).decide(rows[0].id, "approved", user_id=f"U{i}")
                for i in range(12)
            )
        )
    assert [o.recorded for o in outcomes].count(True) == 1


async def test_n_of_m_approvals_need_distinct_users(store: SQLiteStore) -> None:
    _, rows = await paused_session(store)
    ledger_id = rows[0].id

    first = await store.decide(ledger_id, "approved", user_id="U1", required_approvals=2)
    assert first.recorded and first.row.status == "pending"
    assert first.row.approvals == ("U1",)
    assert first.why == "1 of 2 approvals; waiting for 1 more"

    repeat = await store.decide(ledger_id, "approved", user_id="U1", required_approvals=2)
    assert not repeat.recorded and repeat.why == "you already approved"
    assert repeat.row.approvals == ("U1",)

    second = await store.decide(
        ledger_id, "approved", user_id="U2", team_id="T1", required_approvals=2, rule="two-man"
    )
    assert second.recorded and second.why is None
    assert second.row.status == "approved"
    assert second.row.approvals == ("U1", "U2")
    assert second.row.decided_by == "U2"

    late = await store.decide(ledger_id, "approved", user_id="U3", required_approvals=2)
    assert not late.recorded
    assert late.why == "already approved by <@U1> and <@U2> at 2025-03-01 09:00:00 UTC"

    decisions = [r for r in await store.audit_rows() if r.event == "decision"]
    assert [(r.actor, r.details["final"]) for r in decisions] == [("U1", False), ("U2", True)]
    assert decisions[1].details["rule"] == "two-man"


async def test_one_rejection_rejects_a_partly_approved_call(store: SQLiteStore) -> None:
    _, rows = await paused_session(store)
    await store.decide(rows[0].id, "approved", user_id="U1", required_approvals=3)
    outcome = await store.decide(rows[0].id, "rejected", user_id="U2", reason="risky")
    assert outcome.recorded
    assert (outcome.row.status, outcome.row.reason, outcome.row.decided_by) == (
        "rejected",
        "risky",
        "U2",
    )


async def test_decisions_on_held_or_unknown_calls_are_refused(store: SQLiteStore) -> None:
    _, rows = await paused_session(store)
    held = await store.decide(rows[1].id, "approved", user_id="U1")
    assert not held.recorded and held.why is not None and "needs no approval" in held.why
    assert held.row.status == "pending"
    with pytest.raises(UnknownCall, match="'forged'"):
        await store.decide("forged", "approved", user_id="U1")
    with pytest.raises(ValueError, match="decision"):
        await store.decide(rows[0].id, "maybe", user_id="U1")  # type: ignore[arg-type]


async def test_batch_complete_and_responses(store: SQLiteStore) -> None:
    session_id, rows = await paused_session(store)
    assert not batch_complete(rows)
    assert not batch_complete([])
    assert not batch_complete([rows[1]])  # held siblings alone are no paused batch
    await store.decide(rows[0].id, "approved", user_id="U1", reason="looks fine")
    assert not batch_complete(await store.batch_calls(session_id))
    await store.decide(rows[2].id, "rejected", user_id="U2")
    assert batch_complete(await store.batch_calls(session_id))

    plain = await store.responses_for_batch(session_id)  # the store knows no Slack markup
    assert [(r.call_id, r.decision, r.decided_by) for r in plain] == [
        (RESTART.id, "approved", "U1"),
        (DROP.id, "rejected", "U2"),
    ]
    responses = await store.responses_for_batch(session_id, mention=lambda user: f"<@{user}>")
    assert [(r.call_id, r.decision, r.decided_by) for r in responses] == [
        (RESTART.id, "approved", "<@U1>"),
        (DROP.id, "rejected", "<@U2>"),
    ]
    assert responses[0].reason == "looks fine"
    assert responses[1].tool_message_text() == "Rejected: User denied (rejected by <@U2>)"


# -- expiry ---------------------------------------------------------------------------------------


async def test_expire_due_expires_undecided_gated_calls(store: SQLiteStore, clock: Clock) -> None:
    session_id, rows = await paused_session(store)
    await store.set_expiry(rows[0].id, T0 + timedelta(minutes=15))
    await store.set_expiry(rows[2].id, T0 + timedelta(hours=2), ttl="2h")
    await store.decide(rows[2].id, "approved", user_id="U1")

    assert await store.expire_due() == []
    clock.advance(minutes=15)
    expired = await store.expire_due()
    assert [(r.id, r.status, r.ttl) for r in expired] == [(rows[0].id, "expired", "15m")]
    assert await store.expire_due() == []
    assert await store.next_expiry() is None

    late = await store.decide(rows[0].id, "approved", user_id="U2")
    assert not late.recorded
    assert late.why == "expired at 2025-03-01 09:15:00 UTC (no decision within 15m); it was not run"
    responses = await store.responses_for_batch(session_id)
    assert responses[0].decision == "expired"
    assert responses[0].tool_message_text() == (
        "Expired: no decision within 15m; the call was not run"
    )
    events = [(r.event, r.actor) for r in await store.audit_rows() if r.call_id == RESTART.id]
    assert events[-2:] == [("expiry", None), ("refusal", "U2")]


async def test_a_click_after_the_deadline_expires_the_call_instead(
    store: SQLiteStore, clock: Clock
) -> None:
    _, rows = await paused_session(store)
    await store.set_expiry(rows[0].id, T0 + timedelta(minutes=5))
    clock.advance(minutes=6)
    outcome = await store.decide(rows[0].id, "approved", user_id="U1")
    assert not outcome.recorded
    assert outcome.row.status == "expired"
    assert outcome.why is not None and outcome.why.startswith("expired at 2025-03-01 09:05:00 UTC")


def test_format_duration_approximates_only_measured_spans() -> None:
    """One `format_duration` (bot._duration) for the policy and the store: exact for what people
    wrote, rounded to the minute within 5 seconds for a span measured on a clock."""
    assert not hasattr(bot.store, "format_duration")
    assert format_duration(timedelta(minutes=15, seconds=2), approximate=True) == "15m"
    assert format_duration(timedelta(minutes=14, seconds=57.6), approximate=True) == "15m"
    assert format_duration(timedelta(minutes=15, seconds=2)) == "15m2s"
    for approximate in (False, True):
        assert format_duration(timedelta(seconds=90), approximate=approximate) == "1m30s"
        assert format_duration(timedelta(hours=1, minutes=30), approximate=approximate) == "1h30m"
        assert format_duration(timedelta(days=1), approximate=approximate) == "1d"
        assert format_duration(timedelta(seconds=-3), approximate=approximate) == "0s"


async def test_set_expiry_says_the_time_left_in_round_words(
    store: SQLiteStore, clock: Clock
) -> None:
    _, rows = await paused_session(store)
    clock.advance(seconds=3)  # the card went out a moment after the pause
    await store.set_expiry(rows[0].id, T0 + timedelta(minutes=15))
    await store.set_expiry(rows[2].id, T0 + timedelta(minutes=1, seconds=33))
    assert [(r.ttl) for r in await store.batch_calls(rows[0].session_id)] == ["15m", None, "1m30s"]


async def test_the_ledger_shows_and_digests_arguments_as_the_loop_does(
    store: SQLiteStore,
) -> None:
    """`ToolCall.display_arguments()` is the one spelling: the parsed object, else the raw text."""
    good = call("call_good", "service_status", service="api")
    broken = ToolCall(id="call_broken", name="service_status", arguments='{"service": ')
    listed = ToolCall(id="call_list", name="service_status", arguments="[1, 2]")
    assert good.display_arguments() == {"service": "api"}
    assert broken.display_arguments() == '{"service": '
    assert listed.display_arguments() == "[1, 2]"
    session = await store.get_or_create_session("T1", "C1", "5.0")
    message = ChatMessage.assistant(None, (good, broken, listed))
    await store.record_pause(session.id, message, [], [])
    rows = await store.batch_calls(session.id)
    for row, sent in zip(rows, (good, broken, listed), strict=True):
        shown = sent.display_arguments()
        assert (row.arguments, row.digest) == (
            canonical_arguments(shown),
            call_digest(sent.name, shown),
        )


# -- execution ------------------------------------------------------------------------------------


async def test_start_tool_call_allows_only_approved_or_held_calls(store: SQLiteStore) -> None:
    session_id, rows = await paused_session(store)
    with pytest.raises(ToolCallAlreadyStarted) as undecided:
        await store.start_tool_call(session_id, RESTART)
    assert undecided.value.status == "pending"

    await store.decide(rows[0].id, "approved", user_id="U1")
    await store.decide(rows[2].id, "rejected", user_id="U1")
    await store.start_tool_call(session_id, RESTART)
    assert (await store.get_call(rows[0].id)).status == "executing"  # type: ignore[union-attr]
    with pytest.raises(ToolCallAlreadyStarted) as twice:
        await store.start_tool_call(session_id, RESTART)
    assert twice.value.status == "executing"
    with pytest.raises(ToolCallAlreadyStarted) as rejected:
        await store.start_tool_call(session_id, DROP)
    assert rejected.value.status == "rejected"

    await store.start_tool_call(session_id, STATUS)  # the held sibling needs no decision
    refusals = [r for r in await store.audit_rows() if r.event == "refusal"]
    assert [(r.call_id, r.details["why"]) for r in refusals] == [
        (RESTART.id, "already pending"),
        (RESTART.id, "already executing"),
        (DROP.id, "already rejected"),
    ]


async def test_finish_records_the_result_and_its_tool_message_together(
    store: SQLiteStore, clock: Clock
) -> None:
    session_id, rows = await paused_session(store)
    await store.decide(rows[0].id, "approved", user_id="U1")
    await store.start_tool_call(session_id, RESTART)
    clock.advance(seconds=3)
    answer = ChatMessage.tool("restarted", RESTART.id)
    await store.finish_tool_call(session_id, RESTART, answer, is_error=False)

    row = await store.get_call(rows[0].id)
    assert row is not None
    assert (row.status, row.result, row.is_error) == ("done", "restarted", False)
    assert (row.started_at, row.finished_at) == (T0, T0 + timedelta(seconds=3))
    assert (await store.load_messages(session_id))[-1] == answer
    with pytest.raises(ToolCallAlreadyStarted):
        await store.start_tool_call(session_id, RESTART)
    with pytest.raises(StoreError, match="not executing"):
        await store.finish_tool_call(session_id, RESTART, answer, is_error=False)
    events = [r.event for r in await store.audit_rows() if r.call_id == RESTART.id]
    assert events == ["request", "decision", "execution_start", "execution_end", "refusal"]


async def test_calls_of_unpaused_rounds_get_ledger_rows_and_ids_may_repeat_later(
    store: SQLiteStore,
) -> None:
    """Some providers number calls per turn ("call_0" every time): a later turn's call with a
    reused id is a new call, while the same call of the same turn can never start twice."""
    session = await store.get_or_create_session("T1", "C1", "1.0")
    lookup = call("call_0", "service_status", service="api")
    for turn in range(2):
        await store.append_messages(session.id, [ChatMessage.assistant(None, (lookup,))])
        await store.start_tool_call(session.id, lookup)
        with pytest.raises(ToolCallAlreadyStarted):
            await store.start_tool_call(session.id, lookup)
        await store.finish_tool_call(
            session.id, lookup, ChatMessage.tool(f"up ({turn})", "call_0"), is_error=False
        )
    row = await store.find_call(session.id, "call_0")
    assert row is not None
    assert (row.status, row.result, row.needs_approval, row.batch_id) == (
        "done",
        "up (1)",
        False,
        None,
    )


async def test_starting_a_call_no_message_asked_for_is_refused(store: SQLiteStore) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    with pytest.raises(UnknownCall, match="call_restart"):
        await store.start_tool_call(session.id, RESTART)


# -- crash recovery -------------------------------------------------------------------------------


async def test_recover_interrupts_executing_calls_and_answers_the_rest(
    db: Path, clock: Clock
) -> None:
    async with SQLiteStore(db, clock=clock) as store:
        session_id, rows = await paused_session(store)
        waiting_id, _ = await paused_session(store, thread="2.0")
        await store.decide(rows[0].id, "approved", user_id="U1")
        await store.decide(rows[2].id, "rejected", user_id="U1")
        assert await store.claim(session_id, ["awaiting_approval"], "resuming")
        await store.set_state(session_id, "running")
        await store.start_tool_call(session_id, RESTART)
        # The process dies here: RESTART was running, STATUS and DROP never got an answer.

    async with SQLiteStore(db, clock=clock) as store:
        recovered = await store.recover()
        assert [r.session.id for r in recovered] == [session_id]
        assert recovered[0].session.state == "idle"
        assert [r.id for r in recovered[0].interrupted] == [rows[0].id]
        assert recovered[0].interrupted[0].status == "interrupted"
        assert recovered[0].not_run == [STATUS.id, DROP.id]

        history = await store.load_messages(session_id)
        assert history_problems(history) == []
        assert pending_tool_calls(history) == []
        assert [(m.tool_call_id, m.content) for m in history[-3:]] == [
            (RESTART.id, INTERRUPTED_MESSAGE),
            (STATUS.id, NOT_RUN_MESSAGE),
            (DROP.id, NOT_RUN_MESSAGE),
        ]
        with pytest.raises(ToolCallAlreadyStarted) as again:
            await store.start_tool_call(session_id, RESTART)
        assert again.value.status == "interrupted"

        waiting = await store.get_session(waiting_id)
        assert waiting is not None and waiting.state == "awaiting_approval"
        assert {r.status for r in await store.batch_calls(waiting_id)} == {"pending"}

        interrupted = [r for r in await store.audit_rows() if r.event == "interrupted"]
        assert [(r.call_id, r.actor) for r in interrupted] == [(RESTART.id, None)]
        assert await store.recover() == []  # nothing left to repair


async def test_recover_ends_crashed_runs_with_no_executing_call(store: SQLiteStore) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    assert await store.claim(session.id, ["idle"], "running")
    # A round that did not pause: its assistant message is stored, no call had started yet.
    await store.append_messages(
        session.id, [ChatMessage.user("status?"), ChatMessage.assistant(None, (STATUS,))]
    )
    quiet = await store.get_or_create_session("T1", "C1", "2.0")
    assert await store.claim(quiet.id, ["idle"], "running")

    recovered = await store.recover()
    by_id = {r.session.id: r for r in recovered}
    assert set(by_id) == {session.id, quiet.id}
    assert by_id[session.id].not_run == [STATUS.id]
    assert by_id[session.id].interrupted == []
    assert by_id[quiet.id].not_run == []
    history = await store.load_messages(session.id)
    assert history[-1] == ChatMessage.tool(NOT_RUN_MESSAGE, STATUS.id)
    assert history_problems(history) == []
    assert {r.session.state for r in recovered} == {"idle"}


# -- reopening ------------------------------------------------------------------------------------


async def test_reopening_returns_the_same_sessions_messages_ledger_and_audit(
    db: Path, clock: Clock
) -> None:
    async with SQLiteStore(db, clock=clock) as store:
        session_id, rows = await paused_session(store)
        await store.set_card(rows[0].id, "C1", "9.9")
        await store.decide(rows[0].id, "approved", user_id="U1", required_approvals=2)
        await store.audit("note", actor="U1", session_id=session_id, details={"k": [1, "ü"]})
        before = (
            await store.get_session(session_id),
            await store.load_messages(session_id),
            await store.batch_calls(session_id),
            await store.audit_rows(),
        )
    async with SQLiteStore(db, clock=clock) as store:
        after = (
            await store.get_session(session_id),
            await store.load_messages(session_id),
            await store.batch_calls(session_id),
            await store.audit_rows(),
        )
    assert after == before
    assert before[2][0].approvals == ("U1",)
    assert before[3][-1].details == {"k": [1, "ü"]}


# -- audit ----------------------------------------------------------------------------------------


async def test_audit_rows_cannot_be_updated_or_deleted(db: Path) -> None:
    async with SQLiteStore(db) as store:
        await store.audit("note", actor="U1", details={"x": 1})
        rows = await store.audit_rows()
    raw = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute("UPDATE audit SET actor = 'UEVIL'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute("DELETE FROM audit")
        raw.rollback()
    finally:
        raw.close()
    async with SQLiteStore(db) as store:
        assert await store.audit_rows() == rows


async def test_audit_rows_since(store: SQLiteStore, clock: Clock) -> None:
    await store.audit("old", actor=None)
    clock.advance(hours=3)
    await store.audit("new", actor="U1", call_id="call_1")
    assert [r.event for r in await store.audit_rows()] == ["old", "new"]
    recent = await store.audit_rows(since=T0 + timedelta(hours=1))
    assert [(r.event, r.at, r.call_id) for r in recent] == [
        ("new", T0 + timedelta(hours=3), "call_1")
    ]


# -- Slack retries --------------------------------------------------------------------------------


async def test_first_sighting_deduplicates_and_forgets_after_a_day(
    store: SQLiteStore, clock: Clock
) -> None:
    assert await store.first_sighting("Ev1")
    assert not await store.first_sighting("Ev1")
    assert await store.first_sighting("Ev2")
    clock.advance(hours=23)
    assert not await store.first_sighting("Ev1")
    clock.advance(hours=2)
    assert await store.first_sighting("Ev1")


# -- end to end with the agent --------------------------------------------------------------------


async def test_pause_and_resume_through_the_agent_across_a_restart(db: Path) -> None:
    ran: list[tuple[str, str]] = []
    seen_status: list[str] = []

    def ledger_status(call_id: str) -> str:
        """Read the ledger on a separate connection, as another process would."""
        raw = sqlite3.connect(db)
        try:
            row = raw.execute("SELECT status FROM tool_calls WHERE call_id = ?", (call_id,))
            return str(row.fetchone()[0])
        finally:
            raw.close()

    @tool(requires_approval=True)
    async def restart_service(service: str, force: bool = False) -> str:
        """Restart a service."""
        seen_status.append(await asyncio.to_thread(ledger_status, RESTART.id))
        ran.append(("restart_service", service))
        return f"{service} restarted"

    @tool
    async def service_status(service: str) -> str:
        """Report a service's status."""
        ran.append(("service_status", service))
        return f"{service} is up"

    @tool(requires_approval=True)
    async def drop_cache(region: str) -> str:
        """Drop a cache."""
        ran.append(("drop_cache", region))
        return "dropped"

    tools = [restart_service, service_status, drop_cache]
    client = ScriptedChatClient(
        Turn(text="Restarting.", tool_calls=[RESTART, STATUS, DROP]),
        Turn(text="All done."),
    )

    async with SQLiteStore(db) as store:
        agent = ChatClientAgent(client, tools=tools, store=store)
        row = await store.get_or_create_session("T1", "C1", "1.0")
        await store.set_requester(row.id, "UREQ")
        assert await store.claim(row.id, ["idle"], "running")
        updates = await collect(agent.run("restart api", AgentSession(row.id)))
        assert updates[-1] == Finish(FinishReason.AWAITING_APPROVAL, None)
        requests = [u for u in updates if isinstance(u, ToolApprovalRequest)]
        assert [r.call_id for r in requests] == [RESTART.id, DROP.id]
        assert ran == []
        batch = await store.batch_calls(row.id)
        assert [r.digest for r in batch if r.needs_approval] == [r.digest for r in requests]
        await store.decide(batch[0].id, "approved", user_id="UOPS")
        await store.decide(batch[2].id, "rejected", user_id="UOPS", reason="not today")

    async with SQLiteStore(db) as store:  # the bot restarted between the clicks and the resume
        assert await store.recover() == []
        agent = ChatClientAgent(client, tools=tools, store=store)
        batch = await store.batch_calls(row.id)
        assert batch_complete(batch)
        assert await store.claim(row.id, ["awaiting_approval"], "resuming")
        assert not await store.claim(row.id, ["awaiting_approval"], "resuming")
        options = AgentRunOptions().with_tool_approval_responses(
            await store.responses_for_batch(row.id)
        )
        updates = await collect(agent.run(None, AgentSession(row.id), options))
        assert updates[-1] == Finish(FinishReason.STOP, None)
        results = {u.call_id: u.content for u in updates if isinstance(u, ToolResult)}
        assert results == {
            RESTART.id: "api restarted",
            STATUS.id: "api is up",
            DROP.id: "Rejected: not today (rejected by UOPS)",
        }
        assert ran == [("restart_service", "api"), ("service_status", "api")]
        assert seen_status == ["executing"]  # committed before the tool ran

        history = await store.load_messages(row.id)
        assert history_problems(history) == []
        assert history[-1] == ChatMessage.assistant("All done.")
        statuses = [(r.call_id, r.status) for r in await store.batch_calls(row.id)]
        assert statuses == [(RESTART.id, "done"), (STATUS.id, "done"), (DROP.id, "rejected")]

        with pytest.raises(ResumeError):  # a second resume finds nothing pending
            await collect(agent.run(None, AgentSession(row.id), options))
        assert ran == [("restart_service", "api"), ("service_status", "api")]
        events = [r.event for r in await store.audit_rows()]
    assert events == [
        "request",
        "request",
        "decision",
        "decision",
        "execution_start",
        "execution_end",
        "execution_start",
        "execution_end",
    ]


# -- opsgate audit --------------------------------------------------------------------------------


async def test_run_audit_prints_a_table_and_json_lines(db: Path, clock: Clock) -> None:
    async with SQLiteStore(db, clock=clock) as store:
        await store.audit("old", actor="U0")
        clock.advance(hours=2)
        await store.audit(
            "decision",
            actor="U1",
            session_id="s1",
            call_id="call_1",
            details={"reason": "ok\x1b[31m red\x9b2J"},
        )

    table = io.StringIO()
    assert await run_audit(db, since=None, as_json=False, out=table) == 0
    lines = table.getvalue().splitlines()
    assert lines[0].split() == ["time", "(UTC)", "event", "actor", "session", "call", "details"]
    assert lines[1].startswith("2025-03-01 09:00:00  old ")
    assert "2025-03-01 11:00:00  decision  U1" in lines[2]
    assert not any(c in table.getvalue() for c in "\x1b\x9b")  # nothing reaches the terminal
    assert "\\u001b[31m red\\x9b2J" in lines[2]

    out = io.StringIO()
    since = T0 + timedelta(hours=1)
    assert await run_audit(db, since=since, as_json=True, out=out) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["event"], r["actor"], r["call_id"]) for r in rows] == [("decision", "U1", "call_1")]
    assert rows[0]["details"] == {"reason": "ok\x1b[31m red\x9b2J"}
    assert rows[0]["at"] == "2025-03-01T11:00:00Z"
    assert out.getvalue().isascii()

    empty = io.StringIO()
    assert await run_audit(db, since=T0 + timedelta(days=1), as_json=False, out=empty) == 0
    assert empty.getvalue() == "no audit rows since 2025-03-02 09:00:00 UTC\n"


async def test_run_audit_without_a_database_fails_and_creates_none(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    out, err = io.StringIO(), io.StringIO()
    assert await run_audit(missing, since=None, as_json=False, out=out, err=err) == 1
    assert str(missing) in err.getvalue()
    assert not missing.exists() and out.getvalue() == ""


async def test_run_audit_reports_a_newer_schema(db: Path) -> None:
    raw = sqlite3.connect(db)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    raw.close()
    err = io.StringIO()
    assert await run_audit(db, since=None, as_json=True, out=io.StringIO(), err=err) == 1
    assert "schema version" in err.getvalue()


def test_parse_since() -> None:
    now = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
    assert parse_since("2h", now=now) == now - timedelta(hours=2)
    assert parse_since("7d", now=now) == now - timedelta(days=7)
    assert parse_since(" 1h30m ", now=now) == now - timedelta(hours=1, minutes=30)
    assert parse_since("1w", now=now) == now - timedelta(weeks=1)
    assert parse_since("2025-03-01") == datetime(2025, 3, 1, tzinfo=UTC)
    assert parse_since("2025-03-01T09:30Z") == datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
    offset = parse_since("2025-03-01T11:30+02:00")
    assert offset == datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
    for bad in ("yesterday", "", "2x", "h2", "2025-13-01"):
        with pytest.raises(ValueError, match="cannot read"):
            parse_since(bad)


async def test_a_version_1_file_is_migrated_keeping_its_rows(db: Path) -> None:
    """A file written by the first release opens, is upgraded in place, and loses nothing."""
    from bot.store._schema import MIGRATIONS

    raw = sqlite3.connect(db)
    for statement in MIGRATIONS[0]:
        raw.execute(statement)
    now = "2026-11-01T09:00:00+00:00"
    raw.execute(
        "INSERT INTO sessions (id, team_id, channel_id, thread_ts, state, created_at, updated_at)"
        " VALUES ('s1', 'T1', 'C1', '1.0', 'awaiting_approval', ?, ?)",
        (now, now),
    )
    raw.execute(
        "INSERT INTO tool_calls (id, session_id, batch_id, message_seq, position, call_id, name,"
        " arguments, digest, needs_approval, status, created_at)"
        " VALUES ('L1', 's1', 'b1', 0, 0, 'call_1', 'run_command', '{}', 'abc', 1, 'pending', ?)",
        (now,),
    )
    raw.execute("PRAGMA user_version = 1")
    raw.commit()
    raw.close()

    async with SQLiteStore(db) as store:
        row = await store.get_call("L1")
        session = await store.get_session("s1")
    assert row is not None and row.status == "pending" and row.reminded_at is None
    assert session is not None and session.state == "awaiting_approval"
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        raw.close()
