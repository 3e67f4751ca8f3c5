"""The contract of settling and superseded outbox rows: a keyed row that settles is due once its
burst of changes quieted (or three settles after it began): one write per burst; a row a newer one
of its key replaced while it was claimed is never sent, by its own sender or, after its death, by
anyone else, and hands its tries on to the newer row."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.store import OutboxEntry, Store

from .conftest import StoreFactory
from .helpers import Clock

LEASE = timedelta(seconds=30)


def tab(text: str, *, settle: float = 0.0) -> OutboxEntry:
    return OutboxEntry("views.publish", {"text": text}, 3, key="home:U1", settle=settle)


async def texts(store: Store, claimer: str = "a") -> list[str]:
    return [str(r.params["text"]) for r in await store.claim_outbox(claimer, limit=10, lease=LEASE)]


async def test_a_burst_of_settling_rows_is_one_row_due_when_the_burst_quieted(
    store: Store, clock: Clock
) -> None:
    start = clock.now
    await store.put_outbox([tab("one", settle=2.0)])
    assert await texts(store) == []
    assert await store.outbox_next_due() == start + timedelta(seconds=2)
    clock.advance(seconds=1.5)
    await store.put_outbox([tab("two", settle=2.0)])  # the burst goes on: due 2 s after it
    assert await store.outbox_next_due() == start + timedelta(seconds=3.5)
    clock.advance(seconds=1.5)
    assert await texts(store) == []
    clock.advance(seconds=0.5)
    assert await texts(store) == ["two"]
    assert await store.outbox_next_due() is None
    await store.put_outbox([tab("three", settle=2.0)])  # while two is in flight: a new burst
    assert await store.outbox_next_due() == clock.now + timedelta(seconds=2)


async def test_a_burst_that_never_quiets_is_written_after_three_settles(
    store: Store, clock: Clock
) -> None:
    start = clock.now
    for n in range(5):
        await store.put_outbox([tab(f"change {n}", settle=2.0)])
        clock.advance(seconds=1.5)
    # Each change put the due time 2 s after it, but no later than 6 s after the first.
    assert clock.now == start + timedelta(seconds=7.5)
    assert await store.outbox_next_due() is None  # due already, not 2 s after the last (8 s)
    assert await texts(store) == ["change 4"]


async def test_a_row_superseded_while_claimed_is_not_sent(store: Store, clock: Clock) -> None:
    [first] = await store.put_outbox([tab("one")])
    assert await texts(store) == ["one"]
    assert await store.outbox_superseded(first) is False  # nothing newer: it is sent
    clock.advance(seconds=1)
    await store.put_outbox([tab("two")])
    assert await store.outbox_superseded(first) is True
    [row] = await store.claim_outbox("a", limit=10, lease=LEASE)
    assert (row.params["text"], row.attempts) == ("two", 1)  # the first was never tried
    assert (await store.outbox_stats()).depth == {3: 1}


async def test_a_dead_senders_superseded_row_is_dropped_and_its_try_handed_on(
    new_store: StoreFactory, clock: Clock
) -> None:
    async with new_store() as dead, new_store() as alive:
        await dead.put_outbox([tab("one")])
        assert await texts(dead, "dead") == ["one"]  # claimed, maybe sent, then killed
        clock.advance(seconds=1)
        await alive.put_outbox([tab("two")])
        assert await texts(alive, "alive") == []  # one is in flight: two waits
        clock.advance(seconds=31)
        [row] = await alive.claim_outbox("alive", limit=10, lease=LEASE)
        assert row.params["text"] == "two"
        assert row.attempts == 2  # the dead sender's try: its drawing looks before posting
        assert (await alive.outbox_stats()).depth == {3: 1}


async def sent_once(store: Store) -> list[str]:
    """What a sender sends of the rows owed now: each claimed row, unless superseded."""
    sent: list[str] = []
    while rows := await store.claim_outbox("a", limit=10, lease=LEASE):
        for row in rows:
            if not await store.outbox_superseded(row.id):
                sent.append(str(row.params["text"]))
            await store.outbox_sent(row.id)
    return sent


async def test_rows_of_a_key_whose_times_tie_are_sent_once(store: Store, clock: Clock) -> None:
    """A settling row keeps its burst's first time, so two rows of a key may carry the same
    one (here: the first put back while the second came, the clock not moving); the key's
    rows are still claimed one at a time, and one of them is sent."""
    [first] = await store.put_outbox([tab("one")])
    assert await texts(store) == ["one"]
    await store.put_outbox([tab("two", settle=2.0)])
    await store.outbox_later(first, clock.now, "waiting for its Slack budget", tried=False)
    clock.advance(seconds=2)
    assert len(await sent_once(store)) == 1
    assert (await store.outbox_stats()).depth == {}


async def test_puts_of_a_key_in_overlapping_transactions_are_sent_once(
    new_store: StoreFactory, clock: Clock
) -> None:
    """Two replicas owe one person's tab at the same moment: on PostgreSQL the second put
    commits while the first is still open, so neither deleted the other's row; one is sent.
    (SQLite's writers are serial: the second put waits, then supersedes the first.)"""
    async with new_store() as one, new_store() as two:
        async with one._db.transaction("put the first row") as tx:
            await one._put_outbox(tx, [tab("one", settle=2.0)])
            other = asyncio.create_task(two.put_outbox([tab("two", settle=2.0)]))
            if one._db.dialect == "postgresql":
                await asyncio.wait_for(other, timeout=10)
        await asyncio.wait_for(other, timeout=10)
        clock.advance(seconds=2)
        assert len(await sent_once(one)) == 1
        assert (await one.outbox_stats()).depth == {}
