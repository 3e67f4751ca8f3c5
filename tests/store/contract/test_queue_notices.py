"""The contract of each channel's queued notice: a burst is a row every store on the
database shares, opened by a "queued" in the transaction of its outbox intent, drawn again on a
start only while open, holding the posted message's ts, and ended once (a "queued" that came
meanwhile keeps the burst going, without the old message)."""

from __future__ import annotations

from datetime import timedelta

from bot.store import QUEUE_NOTICE, QUEUE_PRIORITY, Store
from bot.store.queue_notices import QUEUE_SETTLE

from .conftest import StoreFactory
from .helpers import Clock

LEASE = timedelta(seconds=30)


async def owed(
    store: Store, clock: Clock, *, at_once: bool = False
) -> list[tuple[str, str | None, dict[str, object], int]]:
    """The drawings owed: none due at once (unless `at_once`: the burst's last word), all once
    they settled (`QUEUE_SETTLE`)."""
    if not at_once:
        assert await store.claim_outbox("reader", limit=100, lease=LEASE) == []
        clock.advance(seconds=QUEUE_SETTLE)
    rows = await store.claim_outbox("reader", limit=100, lease=LEASE)
    for row in rows:
        await store.outbox_sent(row.id)
    return [(r.method, r.key, r.params, r.priority) for r in rows]


async def queue_alert(store: Store, n: int) -> None:
    """A message of C1 waiting in its queue."""
    session = await store.get_or_create_session("T1", "C1", f"1700000000.{n:06d}")
    await store.enqueue(session.id, requester="U1", text=f"alert {n}")


def intent(channel: str) -> tuple[str, str, dict[str, object], int]:
    return (QUEUE_NOTICE, f"queue:{channel}", {"channel": channel}, QUEUE_PRIORITY)


async def test_a_burst_is_shared_by_every_store_and_ends_once(
    new_store: StoreFactory, clock: Clock
) -> None:
    async with new_store() as a, new_store() as b:
        # A start with no burst open writes nothing (every run's start asks).
        assert await b.owe_queue_notice("C1") is False
        await queue_alert(a, 1)
        await queue_alert(b, 2)
        assert await a.owe_queue_notice("C1", concurrency=2) is True
        assert await a.owe_queue_notice("C1", concurrency=3) is True
        assert await owed(a, clock) == [intent("C1")]  # the newer unsent drawing replaced the older
        notice = await b.queue_notice("C1")
        assert notice is not None and notice.ts is None and notice.concurrency == 3
        assert notice.asks == 2
        await b.queue_notice_shown("C1", ts="1700000000.000500", shown="2 waiting")
        for _ in range(2):
            assert await a.claim_queued("C1", limit=10) is not None
        assert await a.owe_queue_notice("C1") is True  # a start on the other store draws it
        assert await owed(b, clock, at_once=True) == [intent("C1")]  # nothing left queued
        seen = await a.queue_notice("C1")
        assert seen is not None and (seen.ts, seen.shown) == ("1700000000.000500", "2 waiting")
        assert await a.queue_notice("C2") is None
        # Deleted by someone: forgotten, and a drawing owed with it (which posts anew).
        assert await b.lost_queue_notice("C1", ts="1700000000.000999") is False
        assert await owed(a, clock) == []
        assert await b.lost_queue_notice("C1", ts="1700000000.000500") is True
        assert await owed(a, clock) == [intent("C1")]
        lost = await a.queue_notice("C1")
        assert lost is not None and lost.ts is None and lost.shown is None
        await b.queue_notice_shown("C1", ts="1700000000.000600", shown="2 waiting")
        seen = await a.queue_notice("C1")
        assert seen is not None and seen.ts == "1700000000.000600"
        # Ended as drawn: gone for both; a start draws nothing any more.
        await a.end_queue_notice("C1", asks=seen.asks, ts=seen.ts)
        assert await b.queue_notice("C1") is None
        assert await b.owe_queue_notice("C1") is False
        assert await owed(a, clock) == []


async def test_a_message_queued_while_a_burst_ended_starts_a_new_one(
    new_store: StoreFactory, clock: Clock
) -> None:
    async with new_store() as a, new_store() as b:
        await queue_alert(a, 1)
        await a.owe_queue_notice("C1", concurrency=1)
        await a.queue_notice_shown("C1", ts="1700000000.000500", shown="1 waiting")
        drawn = await a.queue_notice("C1")
        assert drawn is not None
        await b.owe_queue_notice("C1", concurrency=1)  # queued after the "empty" was drawn
        await a.end_queue_notice("C1", asks=drawn.asks, ts=drawn.ts)
        kept = await b.queue_notice("C1")
        assert kept is not None and kept.ts is None and kept.shown is None  # post a new one
        assert await owed(a, clock) == [intent("C1")]
        await b.end_queue_notice("C1", asks=kept.asks, ts=None)
        assert await a.queue_notice("C1") is None


async def test_a_start_settles_while_messages_wait_and_the_last_start_is_drawn_at_once(
    new_store: StoreFactory, clock: Clock
) -> None:
    """The notice's first word and its edits join what comes after them; its last word ("every
    request has started") has nothing after it to join, and goes at once."""
    async with new_store() as store:
        for n in range(2):
            session = await store.get_or_create_session("T1", "C1", f"1700000000.00010{n}")
            await store.enqueue(session.id, requester="U1", text=f"alert {n}")
        await store.owe_queue_notice("C1", concurrency=1)
        assert await owed(store, clock) == [intent("C1")]  # the burst's post, settled
        assert await store.claim_queued("C1", limit=10) is not None
        await store.owe_queue_notice("C1")  # one still waits: settles
        assert await owed(store, clock) == [intent("C1")]
        assert await store.claim_queued("C1", limit=10) is not None
        await store.owe_queue_notice("C1")  # none waits
        assert await owed(store, clock, at_once=True) == [intent("C1")]


async def test_a_queue_that_empties_within_the_first_settle_owes_only_its_last_word(
    new_store: StoreFactory, clock: Clock
) -> None:
    """Queued and started within `QUEUE_SETTLE`: the unsent first word is superseded by the
    last, which finds nothing posted and nothing waiting (`bot.slack.queue_notice` then posts
    nothing and ends the burst)."""
    async with new_store() as store:
        session = await store.get_or_create_session("T1", "C1", "1700000000.000100")
        await store.enqueue(session.id, requester="U1", text="alert")
        await store.owe_queue_notice("C1", concurrency=1)
        assert await store.claim_outbox("reader", limit=100, lease=LEASE) == []  # settling
        assert await store.claim_queued("C1", limit=10) is not None
        await store.owe_queue_notice("C1")
        assert await owed(store, clock, at_once=True) == [intent("C1")]  # one drawing only
        notice = await store.queue_notice("C1")
        assert notice is not None and notice.ts is None


async def test_a_message_started_before_it_was_told_opens_no_burst(
    new_store: StoreFactory, clock: Clock
) -> None:
    """Another replica's dispatcher started it between its queueing and its "queued"."""
    async with new_store() as a, new_store() as b:
        await queue_alert(a, 1)
        assert await b.claim_queued("C1", limit=10) is not None
        assert await a.owe_queue_notice("C1", concurrency=1) is False
        assert await a.queue_notice("C1") is None
        assert await owed(a, clock, at_once=True) == []
