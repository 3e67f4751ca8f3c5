"""Databases written by the previous release open with today's code, are upgraded in place, and
lose nothing; and a fresh database ends at the same schema as an upgraded one.

The old databases are real: `tests/fixtures/store/` holds an SQLite file (user_version 8) and a
`pg_dump` (schema version 7) that commit d423d41 wrote through its public store API (see the
README there). Each test runs on both: the dump is restored with `psql` into a fresh database
of the private cluster.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agent_core import ChatMessage
from bot.store import (
    SCHEMA_VERSION,
    MoreApprovalsNeeded,
    Quorum,
    Ruling,
    Shortfall,
    SQLiteStore,
    Store,
)
from tests.support.postgres import PostgresCluster, postgres_cluster

__all__ = ["postgres_cluster"]  # the fixture the PostgreSQL half uses

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "store"
THREAD = "1700000003.000100"
"""The old release's paused thread: two gated calls (one half approved, one edited), one held."""

Opener = Callable[..., Store]


def soon_after() -> datetime:
    """A clock an hour after the old release wrote its rows (its event ids not yet forgotten)."""
    return datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


async def _restored(cluster: PostgresCluster) -> str:
    url = await cluster.create_database()
    psql = await asyncio.create_subprocess_exec(
        str(cluster.bin_dir / "psql"),
        "--no-psqlrc",
        "--quiet",
        "-v",
        "ON_ERROR_STOP=1",
        "-d",
        url,
        "-f",
        str(FIXTURES / "postgres-v7.sql"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, errors = await asyncio.wait_for(psql.communicate(), 60)
    assert psql.returncode == 0, errors.decode(errors="replace")
    return url


@pytest.fixture(params=["postgresql", "sqlite"])
async def old(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens stores on a copy of the old release's database of the backend."""
    if request.param == "sqlite":
        db = tmp_path / "opsgate.db"
        shutil.copyfile(FIXTURES / "sqlite-v8.db", db)
        yield lambda **kw: SQLiteStore(db, clock=soon_after, **kw)
        return
    from bot.store import PostgresStore

    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    url = await _restored(cluster)
    try:
        yield lambda **kw: PostgresStore(url, clock=soon_after, **kw)
    finally:
        await cluster.drop_database(url)


async def _version(store: Store) -> int:
    if isinstance(store, SQLiteStore):
        raw = sqlite3.connect(store.path)
        try:
            return int(raw.execute("PRAGMA user_version").fetchone()[0])
        finally:
            raw.close()
    return int(await store.schema_version())  # type: ignore[attr-defined]


async def test_the_old_release_database_is_upgraded_and_reads_back(old: Opener) -> None:
    async with old() as store:
        assert await _version(store) == SCHEMA_VERSION
        states = {}
        for thread in ("1700000001.000100", "1700000003.000100", "1700000004.000100"):
            found = await store.find_session("T1", "C1", thread)
            assert found is not None
            states[thread] = found.state
        failed = await store.find_session("T1", "C2", "1700000002.000100")
        assert failed is not None and (failed.state, failed.error) == (
            "failed",
            "model unreachable",
        )
        assert states == {
            "1700000001.000100": "idle",
            "1700000003.000100": "awaiting_approval",
            "1700000004.000100": "idle",
        }

        # The paused batch: the model's order, cards, the N-of-M partial and the edit.
        paused = await store.find_session("T1", "C1", THREAD)
        assert paused is not None
        rows = await store.batch_calls(paused.id)
        by = {row.call_id: row for row in rows}
        assert [row.call_id for row in rows] == ["call_restart", "call_drop", "call_status"]
        assert [row.needs_approval for row in rows] == [True, True, False]
        restart, drop = by["call_restart"], by["call_drop"]
        assert (restart.status, restart.approvals, restart.ttl) == ("pending", ("UBOB",), "1 hour")
        assert restart.expires_at is not None and restart.expires_at.year == 2028
        # Written before requirements were stored: its one requirement, every approval toward it.
        assert restart.quorum is None and restart.quorum_state() is None
        assert restart.card_channel == "C1" and restart.card_drawn == "drawn-pending"
        assert (drop.status, drop.decided_by, drop.edited_by) == ("approved", "UCAROL", "UCAROL")
        assert drop.edited_arguments == '{"region":"us"}' and drop.arguments == '{"region":"eu"}'
        assert [a.call.call_id for a in await store.pending_approvals()] == ["call_restart"]
        assert await store.next_expiry() == restart.expires_at

        # The history and its summary.
        done = await store.find_session("T1", "C1", "1700000001.000100")
        assert done is not None
        context = await store.load_context(done.id)
        assert context.summary is not None and context.summary.text == "greeted the user"
        assert [m.content for m in context.messages] == ["status?"]
        assert len(await store.load_messages(done.id)) == 3

        # The call that ran, its allowance, and the revoked one.
        active = await store.active_allowances()
        assert [(a.channel_id, a.tool, a.granted_by) for a in active] == [
            ("C1", "purge_queue", "UDAVE")
        ]
        ran = await store.find_session("T1", "C1", "1700000004.000100")
        assert ran is not None
        purge = await store.find_call(ran.id, "call_purge")
        assert purge is not None and (purge.status, purge.result) == ("done", "purged 3 jobs")

        # The queue, the inbox, event dedupe and the Home tab.
        items = await store.queue_items(channel_id="C3")
        assert [(i.text, i.state) for i in items] == [
            ("first", "started"),
            ("second", "queued"),
            ("third", "cancelled"),
        ]
        assert not await store.first_sighting("Ev3")
        assert [v.user_id for v in await store.home_viewers()] == ["UCAROL", "UBOB"]

        # The audit log, every row kept with its details.
        audit = await store.audit_rows()
        assert len(audit) == 17 and audit[-1].details == {"why": "fixture", "n": [1, 2]}
        assert sorted({a.event for a in audit}) == [
            "allowance",
            "allowance_revoked",
            "cancel",
            "decision",
            "edited",
            "execution_end",
            "execution_start",
            "note",
            "request",
        ]


async def test_the_upgraded_database_takes_the_next_steps(old: Opener) -> None:
    """What the old release left half done finishes with today's code: the second approval of
    the N-of-M call, the resume, recovery of the started queue item, the saved delivery."""
    async with old() as store:
        paused = await store.find_session("T1", "C1", THREAD)
        assert paused is not None
        restart = await store.find_call(paused.id, "call_restart")
        assert restart is not None
        outcome = await store.decide(
            restart.id,
            "approved",
            user_id="UERIN",
            ruling=Ruling(required_approvals=2),
            digest=restart.digest,
        )
        assert outcome.recorded and outcome.why is None and outcome.row.status == "approved"
        assert outcome.row.approvals == ("UBOB", "UERIN")
        decided = {r.call_id: r.decision for r in await store.responses_for_batch(paused.id)}
        assert decided == {"call_restart": "approved", "call_drop": "approved"}
        assert await store.claim_resume(paused.id)

        [requeued] = await store.requeue_interrupted()
        assert requeued.text == "first" and requeued.state == "queued"
        [delivery] = await store.inbox_recover()
        assert delivery.kind == "slash" and delivery.payload["text"] == "pending"

        assert await store.context_window("gpt-test") is None
        await store.remember_context_window("gpt-test", 128_000)
        assert await store.context_window("gpt-test") == 128_000
        await store.append_messages(paused.id, [ChatMessage.user("after the upgrade")])


async def test_an_old_approval_counts_toward_the_first_of_several_requirements(
    old: Opener,
) -> None:
    """The old release stored no requirements: its approval was given under the deciding
    rule, so under several requirements it counts toward that one (the first) alone."""
    first = Quorum(key="tools.run_command.rules[0]", label="restart", needed=1)
    second = Quorum(key="tools.run_command.rules[1]", label="drop", needed=2)
    async with old() as store:
        paused = await store.find_session("T1", "C1", THREAD)
        assert paused is not None
        restart = await store.find_call(paused.id, "call_restart")
        assert restart is not None and restart.approvals == ("UBOB",)
        outcome = await store.decide(
            restart.id,
            "approved",
            user_id="UERIN",
            ruling=Ruling(requirements=(first, second)),
            counts_for=[second.key],
            digest=restart.digest,
        )
        assert outcome.recorded and outcome.row.status == "pending"
        assert outcome.why == MoreApprovalsNeeded(2, 1, (Shortfall(second.key, "drop", 1, 2),))


# -- a fresh database ends at the same schema as an upgraded one ----------------------------------


def _sqlite_schema(path: Path) -> list[tuple[Any, ...]]:
    raw = sqlite3.connect(path)
    try:
        return raw.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        ).fetchall()
    finally:
        raw.close()


async def test_a_fresh_sqlite_file_has_the_upgraded_schema(tmp_path: Path) -> None:
    upgraded, fresh = tmp_path / "old.db", tmp_path / "new.db"
    shutil.copyfile(FIXTURES / "sqlite-v8.db", upgraded)
    for path in (upgraded, fresh):
        async with SQLiteStore(path):
            pass
    assert _sqlite_schema(fresh) == _sqlite_schema(upgraded)
    assert any(name == "context_windows" for _, name, _, _ in _sqlite_schema(fresh))


_PG_SCHEMA = {
    "columns": "SELECT table_name, column_name, data_type, is_nullable, column_default "
    "FROM information_schema.columns WHERE table_schema = 'public' "
    "ORDER BY table_name, column_name",
    "constraints": "SELECT conrelid::regclass::text, contype, pg_get_constraintdef(oid) "
    "FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2, 3",
    "indexes": "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = 'public' "
    "ORDER BY 1, 2",
    "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger "
    "WHERE NOT tgisinternal ORDER BY 1, 2",
    "functions": "SELECT proname, prosrc FROM pg_proc "
    "WHERE pronamespace = 'public'::regnamespace ORDER BY 1",
}


async def _pg_schema(url: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = await asyncpg.connect(url)
    try:
        return {what: [tuple(r) for r in await conn.fetch(sql)] for what, sql in _PG_SCHEMA.items()}
    finally:
        await conn.close()


async def test_a_fresh_postgres_database_has_the_upgraded_schema(
    postgres_cluster: PostgresCluster,
) -> None:
    from bot.store import PostgresStore

    upgraded, fresh = await _restored(postgres_cluster), await postgres_cluster.create_database()
    try:
        for url in (upgraded, fresh):
            async with PostgresStore(url) as store:
                assert await store.schema_version() == SCHEMA_VERSION
        old, new = await _pg_schema(upgraded), await _pg_schema(fresh)
        assert new == old
        assert any(row[0] == "context_windows" for row in new["columns"])
    finally:
        for url in (upgraded, fresh):
            await postgres_cluster.drop_database(url)


async def test_the_old_release_audit_rows_are_chained_by_the_migration(old: Opener) -> None:
    """Rows written before the chain get seq 1..N in id order and verify; new rows follow."""
    from bot.store.chain import Intact, verify_chain

    async with old() as store:
        before = await store.audit_rows()
        assert before and [row.seq for row in before] == list(range(1, len(before) + 1))
        await store.audit("request", actor="UNEW")
        rows = await store.audit_rows()
        assert rows[-1].seq == len(before) + 1 and rows[-1].prev_hash == before[-1].hash
        chain_seq, head = await store.audit_chain_head()
        verdict = verify_chain(rows, key=None, chain_seq=chain_seq)
        assert verdict == Intact("intact", len(rows), head)


async def test_the_upgrade_records_how_the_old_release_chain_is_hashed(
    old: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migrated without a key, the old release's plain chain is recorded as not keyed: a bot
    started with a key afterwards is refused rather than writing rows that never verify."""
    from bot.store import StoreError
    from bot.store.chain import UNKEYED

    async with old() as store:
        assert (await store.audit_head()).keyed == UNKEYED
        monkeypatch.setenv("OPSGATE_AUDIT_KEY", "new-key")
        with pytest.raises(StoreError, match="not keyed"):
            await store.audit("request", actor="UNEW")
