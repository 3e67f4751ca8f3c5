"""`bot.store.PostgresStore`: the store's guarantees on a real PostgreSQL server, with two or three
stores on one database racing as replicas would (the private cluster of `tests.support.postgres`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from agent_core import ChatMessage, ToolCallAlreadyStarted
from bot.store import (
    SCHEMA_VERSION,
    AlreadyDecided,
    LateResult,
    PostgresStore,
    StoreError,
    open_store,
)
from bot.store.chain import Intact, verify_chain
from tests.store.contract.helpers import RESTART, STATUS, Clock, mention, paused_session
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.store_helpers import begin_run

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures this module uses

Factory = Callable[..., PostgresStore]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def new_store(postgres_url: str, clock: Clock) -> Factory:
    def make(**kw: Any) -> PostgresStore:
        kw.setdefault("clock", clock)
        kw.setdefault("person", mention)
        return PostgresStore(postgres_url, **kw)

    return make


@pytest.fixture
async def two(new_store: Factory) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    async with new_store() as a, new_store() as b:
        yield a, b


async def test_open_store_picks_postgres_for_a_url(postgres_url: str) -> None:
    store = open_store(postgres_url.replace("postgresql://", "postgres://"))
    assert isinstance(store, PostgresStore)
    async with store:
        assert await store.schema_version() == SCHEMA_VERSION


async def test_replicas_starting_together_migrate_once(new_store: Factory) -> None:
    stores = [new_store() for _ in range(3)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        assert [await s.migrate() for s in stores] == [SCHEMA_VERSION] * 3
        assert await stores[0].schema_version() == SCHEMA_VERSION
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_racing_creators_and_run_claims_agree(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    one, other = await asyncio.gather(
        a.get_or_create_session("T1", "C1", "1.0"), b.get_or_create_session("T1", "C1", "1.0")
    )
    assert one.id == other.id
    wins = await asyncio.gather(*(begin_run(s, one.id) for s in (a, b, a, b)))
    assert sorted(wins) == [False, False, False, True]
    assert (await b.get_session(one.id)).state == "running"  # type: ignore[union-attr]


async def test_first_decision_wins_across_replicas(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    _, rows = await paused_session(a)
    gated = rows[0]
    approve, reject = await asyncio.gather(
        a.decide(gated.id, "approved", user_id="UA"), b.decide(gated.id, "rejected", user_id="UB")
    )
    assert [approve.recorded, reject.recorded].count(True) == 1
    loser = reject if approve.recorded else approve
    assert isinstance(loser.why, AlreadyDecided) and loser.why.by in (("UA",), ("UB",))
    final = await a.get_call(gated.id)
    assert final is not None and final.status in ("approved", "rejected")
    events = [row.event for row in await b.audit_rows()]
    assert events.count("decision") == 1 and events.count("refusal") == 1


async def test_a_resume_is_claimed_once_and_a_call_starts_once(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    session_id, rows = await paused_session(a)
    for row in rows:
        if row.needs_approval:
            await b.decide(row.id, "approved", user_id="UA")
    claims = await asyncio.gather(a.claim_resume(session_id), b.claim_resume(session_id))
    assert sorted(claims) == [False, True]
    await (a if claims[0] else b).resume_started(session_id)
    results = await asyncio.gather(
        a.start_tool_call(session_id, RESTART),
        b.start_tool_call(session_id, RESTART),
        return_exceptions=True,
    )
    assert sum(isinstance(r, ToolCallAlreadyStarted) for r in results) == 1
    assert results.count(None) == 1


async def test_queue_claims_hold_the_channel_limit_across_replicas(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    for n in range(5):
        session = await a.get_or_create_session("T1", "C1", f"{n}.0")
        assert (await b.enqueue(session.id, requester="U1", text=f"job {n}")).item is not None
    claimed = await asyncio.gather(
        *(store.claim_queued("C1", limit=2) for store in (a, b, a, b, a, b))
    )
    started = [item for item in claimed if item is not None]
    assert len(started) == 2
    assert len({item.id for item in started}) == 2
    assert [i.text for i in await a.queue_items(states=["queued"])] == ["job 2", "job 3", "job 4"]
    await a.finish_queued(started[0].id)
    assert await b.end_run(started[0].session_id)
    nxt = await b.claim_queued("C1", limit=2)
    assert nxt is not None and nxt.text == "job 2"


async def test_the_audit_log_is_append_only(new_store: Factory, postgres_url: str) -> None:
    async with new_store() as store:
        await store.audit("note", actor="U1", details={"why": "test"})
    conn = await asyncpg.connect(postgres_url)
    try:
        for sql in ("UPDATE audit SET actor = 'X'", "DELETE FROM audit", "TRUNCATE audit"):
            with pytest.raises(asyncpg.RaiseError, match="append-only"):
                await conn.execute(sql)
    finally:
        await conn.close()
    async with new_store() as store:
        [row] = await store.audit_rows()
        assert (row.event, row.actor, row.details) == ("note", "U1", {"why": "test"})


async def test_an_event_is_handled_by_one_replica(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    seen = await asyncio.gather(*(s.first_sighting("Ev1") for s in (a, b, a, b)))
    assert sorted(seen) == [False, False, False, True]


async def test_recovery_spares_live_replicas_and_takes_over_lapsed_ones(
    two: tuple[PostgresStore, PostgresStore], clock: Clock
) -> None:
    a, b = two
    await a.register_instance(lease=timedelta(seconds=10), name="a")
    await b.register_instance(lease=timedelta(seconds=10), name="b")
    session_id, rows = await paused_session(a)
    for row in rows:
        if row.needs_approval:
            await a.decide(row.id, "approved", user_id="UA")
    assert await a.claim_resume(session_id)
    await a.resume_started(session_id)
    await a.start_tool_call(session_id, RESTART)

    clock.advance(seconds=5)
    assert await b.heartbeat()
    assert await b.recover() == []  # a's lease holds: its call is still running

    clock.advance(seconds=6)  # a's lease lapsed; b's was renewed 6 s ago
    [recovered] = await b.recover()
    assert [c.call_id for c in recovered.interrupted] == [RESTART.id]
    assert recovered.session.state == "idle"
    assert set(recovered.not_run) == {STATUS.id, "call_drop"}
    with pytest.raises(StoreError, match="interrupted, not executing"):
        await a.finish_tool_call(
            session_id, RESTART, ChatMessage.tool("ok", RESTART.id), is_error=False
        )
    assert await b.recover() == []


async def test_a_released_lease_is_recovered_at_once(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    await a.register_instance()
    session = await a.get_or_create_session("T1", "C1", "1.0")
    assert await begin_run(a, session.id)
    await b.register_instance()
    assert await b.recover() == []
    await a.release()
    assert not await a.heartbeat()
    [recovered] = await b.recover()
    assert recovered.session.id == session.id and recovered.session.state == "idle"


async def test_the_inbox_of_a_live_replica_is_spared_and_a_lapsed_ones_claimed_once(
    new_store: Factory, clock: Clock
) -> None:
    async with new_store() as a, new_store() as b, new_store() as c:
        for store, name in ((a, "a"), (b, "b"), (c, "c")):
            await store.register_instance(lease=timedelta(seconds=10), name=name)
        saved = [await a.inbox_add("message", {"n": n}) for n in range(6)]
        assert await b.inbox_recover() == []  # a is alive: its deliveries are its own
        clock.advance(seconds=6)
        assert await b.heartbeat() and await c.heartbeat()
        clock.advance(seconds=6)  # a's lease lapsed
        claims = await asyncio.gather(b.inbox_recover(), c.inbox_recover())
        ids = sorted(item.id for claim in claims for item in claim)
        assert ids == saved
        # The claimer (say b) dies before processing: a survivor claims its rows, once.
        [winner] = [s for s, claim in zip((b, c), claims, strict=True) if claim]
        other = c if winner is b else b
        assert await other.inbox_recover() == []
        await winner.release()
        assert sorted(i.id for i in await other.inbox_recover()) == saved


async def test_a_stalled_replica_that_wakes_with_a_result_audits_it_and_the_call_stays_interrupted(
    two: tuple[PostgresStore, PostgresStore], clock: Clock
) -> None:
    a, b = two
    await a.register_instance(lease=timedelta(seconds=10), name="a")
    await b.register_instance(lease=timedelta(seconds=10), name="b")
    session_id, rows = await paused_session(a)
    for row in rows:
        if row.needs_approval:
            await a.decide(row.id, "approved", user_id="UA")
    assert await a.claim_resume(session_id)
    await a.resume_started(session_id)
    await a.start_tool_call(session_id, RESTART)
    clock.advance(seconds=11)  # a stalls past its lease; b takes over
    assert await b.heartbeat()
    [recovered] = await b.recover()
    assert [c.call_id for c in recovered.interrupted] == [RESTART.id]

    # a wakes with the finished command's result: kept and audited, not a crash.
    with pytest.raises(LateResult):
        await a.finish_tool_call(
            session_id, RESTART, ChatMessage.tool("restarted fine", RESTART.id), is_error=False
        )
    row = await b.find_call(session_id, RESTART.id)
    assert row is not None and row.status == "interrupted" and row.result == "restarted fine"
    events = [
        (e.event, e.details.get("late"))
        for e in await b.audit_rows()
        if e.call_id == RESTART.id and e.event in ("interrupted", "execution_end")
    ]
    assert ("interrupted", None) in events and ("execution_end", True) in events


async def _until(holds: Any, what: str) -> None:
    """Wait (polling the loop, 10 s at most) until `holds()` is true."""
    async with asyncio.timeout(10):
        while not await holds():  # noqa: ASYNC110 -- the database says when: no event to wait on
            await asyncio.sleep(0.005)
    assert await holds(), what


async def test_a_wait_for_the_append_turn_the_database_cannot_see_ends_in_a_deadlock_it_breaks(
    new_store: Factory,
) -> None:
    """A appended (it holds the head) and will next want a row C holds; B waits
    on the head behind A, holding the store's append turn; C, holding that row, waits for the
    turn. The turn is not a database lock, so PostgreSQL sees no cycle: C stops waiting for it
    after `_TURN_SECONDS` and goes to the head, where A and C are a deadlock PostgreSQL breaks.
    Every transaction ends (one of A and C refused), and the chain stays whole."""
    async with new_store() as store:
        await _cycle(store)


async def _cycle(store: PostgresStore) -> None:
    db = store._db
    turn: asyncio.Lock = store._appending
    watcher = await asyncpg.connect(store.url)
    await watcher.execute("CREATE TABLE probe (id int PRIMARY KEY); INSERT INTO probe VALUES (1)")
    a_appended, c_locked = asyncio.Event(), asyncio.Event()

    async def waiting_on_locks(n: int) -> bool:
        count = await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        )
        return bool(count >= n)

    async def a() -> None:
        async with db.transaction("a") as tx:
            await store._write_audit(tx, "request", actor="A", details={})
            a_appended.set()
            await c_locked.wait()
            await _until(lambda: _true(turn.locked() and bool(turn._waiters)), "C awaits the turn")
            await tx.execute("UPDATE probe SET id = 1 WHERE id = 1")

    async def b() -> None:
        await a_appended.wait()
        await store.audit("request", actor="B", details={})

    async def c() -> None:
        await _until(lambda: waiting_on_locks(1), "B waits on the head")
        async with db.transaction("c") as tx:
            await tx.fetch_one("SELECT id FROM probe WHERE id = 1 FOR UPDATE")
            c_locked.set()
            await store._write_audit(tx, "request", actor="C", details={})

    try:
        ends = await asyncio.wait_for(asyncio.gather(a(), b(), c(), return_exceptions=True), 60)
    finally:
        await watcher.close()
    refused = [e for e in ends if isinstance(e, BaseException)]
    assert len(refused) == 1 and "deadlock" in str(refused[0]).lower(), ends
    assert ends[1] is None  # B never was in the cycle
    rows = await store.audit_rows()
    assert [r.seq for r in rows] == [1, 2]
    chain_seq, _ = await store.audit_chain_head()
    assert isinstance(verify_chain(rows, key=None, chain_seq=chain_seq), Intact)


async def _true(value: bool) -> bool:
    return value
