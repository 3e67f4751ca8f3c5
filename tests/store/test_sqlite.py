"""What only the SQLite backend promises: the file, its schema and pragmas, the exclusive lock,
O(1) appends, the append-only trigger, migrations, and `opsgate audit` reading the file."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_core import ChatMessage
from bot.cli.audit import parse_since, run_audit
from bot.store import SCHEMA_VERSION, DatabaseLocked, SchemaTooNew, SQLiteStore, StoreError
from tests.store.contract.helpers import T0, Clock

ROOT = Path(__file__).resolve().parents[2]


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
    assert lines[0].split() == ["time", "(UTC)", "event", "actor", "channel/thread", "call"]
    assert lines[1].strip() == "details"
    assert lines[2].startswith("2025-03-01 09:00:00  old ")
    assert "2025-03-01 11:00:00  decision  U1" in lines[4]
    assert not any(c in table.getvalue() for c in "\x1b\x9b")  # nothing reaches the terminal
    assert "\\u001b[31m red\\x9b2J" in lines[5]

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
    from bot.store.schema.sqlite import SHIPPED

    raw = sqlite3.connect(db)
    for statement in SHIPPED[0]:
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


async def test_a_write_cancelled_while_waiting_for_the_lock_leaves_the_store_usable(
    db: Path,
) -> None:
    """A write waiting in BEGIN IMMEDIATE behind another process's lock is cancelled (a
    shutdown, a timeout): once the lock is free, the next write works."""
    async with SQLiteStore(db, busy_timeout=5.0) as store:
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        waiting = asyncio.create_task(store.audit("probe", actor="U1"))
        await asyncio.sleep(0)  # one turn of the loop: the task takes the lock, then waits
        assert store._file.lock.locked()  # ... in BEGIN IMMEDIATE, behind the other connection
        waiting.cancel()
        other.execute("COMMIT")
        other.close()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await store.audit("after", actor="U1")
        assert [a.event for a in await store.audit_rows()] == ["after"]


async def test_done_request_rows_are_deleted_once_newer_ones_pass_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one intake writes a row per request; done ones do not pile up for ever."""
    from bot.store import queue

    monkeypatch.setattr(queue, "REQUESTS_KEPT", 2)
    path = tmp_path / "opsgate.db"
    async with SQLiteStore(path) as store:
        first = await store.inbox_add("request", {"kind": "event_callback", "body": {"n": 0}})
        second = await store.inbox_add("request", {"kind": "event_callback", "body": {"n": 1}})
        message = await store.inbox_add("message", {"text": "kept"})
        assert first is not None and second is not None and message is not None
        await store.inbox_done(first)
        await store.inbox_done(message)
        for n in range(2, 6):
            await store.inbox_add("request", {"kind": "event_callback", "body": {"n": n}})
    with sqlite3.connect(path) as raw:
        rows = raw.execute("SELECT id, kind, state FROM inbox ORDER BY id").fetchall()
    ids = [r[0] for r in rows]
    assert first not in ids  # done and old: deleted
    assert second in ids  # old but not done: kept for recovery
    assert message in ids  # other kinds are not touched


async def test_an_audit_append_after_a_known_head_is_one_statement(db: Path) -> None:
    """Once the store has appended, the next append is the conditional insert alone: no read
    of the chain head (the insert's trigger checks and advances it)."""
    async with SQLiteStore(db) as store:
        await store.audit("request", actor="U1", details={"n": 0})
        statements: list[str] = []
        await store._connection().set_trace_callback(statements.append)
        await store.audit("request", actor="U1", details={"n": 1})
        await store._connection().set_trace_callback(None)
        # (sqlite3 traces the insert again for each statement of its trigger.)
        ours = {s.split(" (")[0] for s in statements} - {"BEGIN IMMEDIATE", "COMMIT"}
        assert ours == {"INSERT INTO audit"}, statements
        [_, row] = await store.audit_rows()
        assert row.seq == 2


async def test_an_unchained_store_writes_audit_rows_as_before_the_chain(db: Path) -> None:
    """`chained=False` (the benchmark's floor only): one plain insert, no seq and no hash, on a
    database whose chain trigger was dropped (it refuses such rows)."""
    async with SQLiteStore(db, chained=False) as store:
        with pytest.raises(StoreError, match="not its next link"):
            await store.audit("request", actor="U1", details={"n": 0})
        await store._connection().execute("DROP TRIGGER audit_chain_advance")
        await store.audit("request", actor="U1", details={"n": 1})
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT seq, prev_hash, hash, details FROM audit").fetchall()
    finally:
        conn.close()
    assert rows == [(None, None, None, '{"n": 1}')]
