"""What replicas add on PostgreSQL: wake-ups between them (LISTEN/NOTIFY), leases held by the
bot, and the timers that must fire once however many replicas sweep at the same moment."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from bot.runs.replicas import held_lease
from bot.store import PostgresStore, StoreError, Wake
from tests.store.contract.helpers import T0, Clock, mention, paused_session
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


class Heard:
    """The wake-ups one store receives, collected by an owned task."""

    def __init__(self) -> None:
        self.wakes: list[Wake] = []
        self._changed = asyncio.Condition()

    async def collect(self, wakes: AsyncIterator[Wake]) -> None:
        async for wake in wakes:
            async with self._changed:
                self.wakes.append(wake)
                self._changed.notify_all()

    async def wait_for(self, wake: Wake, timeout: float = 10) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: wake in self.wakes), timeout)


@contextlib.asynccontextmanager
async def listening(store: PostgresStore) -> AsyncIterator[Heard]:
    heard = Heard()
    async with store.wakeups() as wakes:
        task = asyncio.create_task(heard.collect(wakes))
        try:
            yield heard
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_decision_on_one_replica_wakes_the_others_not_itself(new_store: Factory) -> None:
    async with new_store() as a, new_store() as b, listening(a) as at_a, listening(b) as at_b:
        session_id, rows = await paused_session(b)
        await b.decide(rows[0].id, "approved", user_id="UA")
        await at_a.wait_for(Wake("resume", session_id))
        # The pause freed the channel's slot and the decision is a wake-up: both from b, so b
        # heard none of them. A marker from a shows b's listener did hear everything before it.
        other = await a.get_or_create_session("T1", "C9", "9.0")
        await a.enqueue(other.id, requester="U1", text="marker")
        await at_b.wait_for(Wake("queue", "C9"))
        assert at_b.wakes == [Wake("queue", "C9")]
        assert Wake("queue", "C1") in at_a.wakes  # the pause ended b's run in C1


async def test_queue_changes_wake_other_replicas(new_store: Factory) -> None:
    async with new_store() as a, new_store() as b, listening(a) as heard:
        session = await b.get_or_create_session("T1", "C1", "1.0")
        item = (await b.enqueue(session.id, requester="U1", text="job")).item
        assert item is not None
        await heard.wait_for(Wake("queue", "C1"))
        claimed = await b.claim_queued("C1", limit=1)
        assert claimed is not None
        heard.wakes.clear()
        await b.release_queued(claimed.id)  # a replica shutting down puts it back
        await heard.wait_for(Wake("queue", "C1"))
        again = await b.claim_queued("C1", limit=1)
        assert again is not None
        heard.wakes.clear()
        assert await b.end_run(again.session_id)  # the slot is free
        await heard.wait_for(Wake("queue", "C1"))


async def test_a_lost_listening_connection_is_an_error(
    new_store: Factory, postgres_url: str
) -> None:
    async with new_store() as a, a.wakeups() as wakes:
        admin = await asyncpg.connect(postgres_url)
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name LIKE '% listen'"
            )
        finally:
            await admin.close()
        assert killed == 1
        with pytest.raises(StoreError, match="lost the wake-up connection"):
            await asyncio.wait_for(anext(aiter(wakes)), 10)


async def test_expiry_and_reminders_fire_once_across_replicas(
    new_store: Factory, clock: Clock
) -> None:
    stores = [new_store() for _ in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        for store in stores:
            await stack.enter_async_context(store)
        ids = []
        for n in range(6):
            _, rows = await paused_session(stores[n % 3], thread=f"{n}.0")
            for row in rows:
                if row.needs_approval:
                    await stores[0].set_expiry(row.id, T0 + timedelta(minutes=10))
                    ids.append(row.id)
        clock.advance(minutes=8)
        reminded = await asyncio.gather(
            *(s.due_reminders(timedelta(minutes=5)) for s in stores * 3)
        )
        assert sorted(r.id for rows in reminded for r in rows) == sorted(ids)
        clock.advance(minutes=3)
        expired = await asyncio.gather(*(s.expire_due() for s in stores * 3))
        assert sorted(r.id for rows in expired for r in rows) == sorted(ids)
        events = [r.event for r in await stores[1].audit_rows()]
        assert events.count("reminder") == len(ids) and events.count("expiry") == len(ids)


async def test_the_bot_holds_a_lease_and_releases_it_last(new_store: Factory) -> None:
    async with new_store() as bot, new_store() as survivor:
        async with held_lease(
            bot, lease=timedelta(seconds=30), heartbeat=timedelta(seconds=10), name="bot"
        ) as instance:
            assert instance is not None and bot.instance_id == instance
            session = await bot.get_or_create_session("T1", "C1", "1.0")
            assert await begin_run(bot, session.id)
            assert await survivor.recover() == []  # the lease holds
        assert bot.instance_id is None
        [recovered] = await survivor.recover()  # released: taken over at once
        assert recovered.session.id == session.id


async def test_a_lease_is_renewed_while_held(new_store: Factory, clock: Clock) -> None:
    async with new_store() as bot, new_store() as survivor:
        beats = asyncio.Event()
        renew = bot.heartbeat

        async def heartbeat() -> bool:
            renewed = await renew()
            beats.set()
            return renewed

        bot.heartbeat = heartbeat  # type: ignore[method-assign]
        async with held_lease(bot, lease=timedelta(seconds=1), heartbeat=timedelta(seconds=0.05)):
            session = await bot.get_or_create_session("T1", "C1", "1.0")
            assert await begin_run(bot, session.id)
            clock.advance(seconds=5)  # without a heartbeat since, the lease would have lapsed
            beats.clear()
            await asyncio.wait_for(beats.wait(), 10)
            assert await survivor.recover() == []
