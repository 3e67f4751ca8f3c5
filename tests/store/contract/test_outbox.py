"""The contract of the outbox: a write owed to Slack is stored before it is tried,
claimed by one sender at a time for a lease, re-claimed when that lease lapses (a dead replica),
and writes that supersede each other are merged before they are sent."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.store import OutboxEntry, Store

from .conftest import StoreFactory
from .helpers import Clock

LEASE = timedelta(seconds=30)


def post(text: str, *, priority: int = 2, key: str | None = None) -> OutboxEntry:
    return OutboxEntry(
        "chat.postMessage", {"channel": "C1", "text": text}, priority, channel_id="C1", key=key
    )


async def test_rows_are_claimed_best_priority_first_and_once(store: Store) -> None:
    await store.put_outbox([post("notice", priority=2), post("card", priority=0)])
    await store.put_outbox([post("answer", priority=1)])
    first = await store.claim_outbox("a", limit=2, lease=LEASE)
    assert [r.params["text"] for r in first] == ["card", "answer"]
    assert [r.attempts for r in first] == [1, 1]
    rest = await store.claim_outbox("b", limit=10, lease=LEASE)
    assert [r.params["text"] for r in rest] == ["notice"]
    assert await store.claim_outbox("c", limit=10, lease=LEASE) == []


async def test_a_sent_row_is_gone_and_a_released_one_comes_back_when_due(
    store: Store, clock: Clock
) -> None:
    [sent, later] = await store.put_outbox([post("one"), post("two")])
    await store.claim_outbox("a", limit=10, lease=LEASE)
    await store.outbox_sent(sent)
    await store.outbox_later(later, clock.now + timedelta(seconds=5), "ratelimited")
    assert await store.claim_outbox("a", limit=10, lease=LEASE) == []
    clock.advance(seconds=6)
    [again] = await store.claim_outbox("a", limit=10, lease=LEASE)
    assert (again.id, again.attempts) == (later, 2)
    stats = await store.outbox_stats()
    assert stats.depth == {2: 1}


async def test_a_lapsed_lease_is_claimed_by_another_sender(
    new_store: StoreFactory, clock: Clock
) -> None:
    async with new_store() as dead, new_store() as alive:
        await dead.put_outbox([post("owed")])
        assert len(await dead.claim_outbox("dead", limit=10, lease=LEASE)) == 1
        assert await alive.claim_outbox("alive", limit=10, lease=LEASE) == []
        clock.advance(seconds=31)
        [row] = await alive.claim_outbox("alive", limit=10, lease=LEASE)
        assert row.params["text"] == "owed"


async def test_concurrent_claims_never_take_the_same_row(new_store: StoreFactory) -> None:
    async with new_store() as one, new_store() as two:
        await one.put_outbox([post(f"m{i}") for i in range(20)])
        claims = await asyncio.gather(
            *(s.claim_outbox(f"s{n}", limit=3, lease=LEASE) for n, s in enumerate([one, two] * 4))
        )
        ids = [r.id for claim in claims for r in claim]
        assert len(ids) == len(set(ids)) == 20


async def test_only_the_latest_unsent_row_of_a_key_is_kept(store: Store, clock: Clock) -> None:
    await store.put_outbox([post("draw 1", key="card:C1:1")])
    clock.advance(seconds=1)
    await store.put_outbox([post("draw 2", key="card:C1:1"), post("other", key="card:C1:2")])
    rows = await store.claim_outbox("a", limit=10, lease=LEASE)
    assert sorted(r.params["text"] for r in rows) == ["draw 2", "other"]


async def test_a_key_in_flight_holds_its_next_row_back(store: Store, clock: Clock) -> None:
    [first] = await store.put_outbox([post("draw 1", key="card:C1:1")])
    assert len(await store.claim_outbox("a", limit=10, lease=LEASE)) == 1
    clock.advance(seconds=1)
    await store.put_outbox([post("draw 2", key="card:C1:1")])  # the claimed one stays
    assert await store.claim_outbox("b", limit=10, lease=LEASE) == []
    await store.outbox_sent(first)
    [second] = await store.claim_outbox("b", limit=10, lease=LEASE)
    assert second.params["text"] == "draw 2"


async def test_a_reaction_removed_before_it_was_sent_is_never_sent(store: Store) -> None:
    add, remove = mark_and_removal()
    await store.put_outbox([add])
    assert await store.put_outbox([remove]) == []
    assert await store.claim_outbox("a", limit=10, lease=LEASE) == []
    # Sent already (claimed): the removal is owed.
    await store.put_outbox([add])
    await store.claim_outbox("a", limit=10, lease=LEASE)
    assert len(await store.put_outbox([remove])) == 1


def mark_and_removal() -> tuple[OutboxEntry, OutboxEntry]:
    """A message's 👀 and its removal: one key, the removal cancelling the mark unsent."""
    key = "reaction:C1:1.0"
    add = OutboxEntry("reactions.add", {"timestamp": "1.0"}, 3, channel_id="C1", key=key)
    remove = OutboxEntry(
        "reactions.remove", {"timestamp": "1.0"}, 3, channel_id="C1", key=key, cancels=True
    )
    return add, remove


async def test_a_mark_superseded_in_flight_by_its_removal_takes_the_removal(
    store: Store, clock: Clock
) -> None:
    """The 👀 claimed and waiting for its bucket when the answer came: neither is sent."""
    add, remove = mark_and_removal()
    [mark] = await store.put_outbox([add])
    await store.claim_outbox("a", limit=10, lease=LEASE)
    clock.advance(seconds=1)
    [removal] = await store.put_outbox([remove])  # the mark is in flight: owed
    assert await store.outbox_superseded(mark)
    assert await store.outbox_kept([mark, removal]) == set()
    assert await store.claim_outbox("b", limit=10, lease=LEASE) == []


async def test_a_mark_put_back_for_its_bucket_is_still_never_tried(
    store: Store, clock: Clock
) -> None:
    """A put-back is not a try: superseded by its removal after one, the mark still takes the
    removal with it (the mark was never made)."""
    add, remove = mark_and_removal()
    [mark] = await store.put_outbox([add])
    await store.claim_outbox("a", limit=10, lease=LEASE)
    await store.outbox_later(mark, clock.now, "waiting for its Slack budget", tried=False)
    [again] = await store.claim_outbox("a", limit=10, lease=LEASE)
    assert again.attempts == 1
    clock.advance(seconds=1)
    [removal] = await store.put_outbox([remove])
    assert await store.outbox_superseded(mark)
    assert await store.outbox_kept([mark, removal]) == set()


async def test_kept_rows_are_those_still_owed(store: Store) -> None:
    """What a sender that put rows back asks before it waits for them."""
    add, remove = mark_and_removal()
    [mark] = await store.put_outbox([add])
    [other] = await store.put_outbox([post("answer")])
    assert await store.outbox_kept([mark, other, "gone"]) == {mark, other}
    await store.put_outbox([remove])  # cancelled before it was sent
    assert await store.outbox_kept([mark, other]) == {other}
    assert await store.outbox_kept([]) == set()


async def test_rows_survive_a_restart(new_store: StoreFactory) -> None:
    async with new_store() as first:
        await first.put_outbox([post("owed", priority=1)])
    async with new_store() as restarted:
        stats = await restarted.outbox_stats()
        assert stats.depth == {1: 1}
        assert stats.oldest is not None
        [row] = await restarted.claim_outbox("r", limit=10, lease=LEASE)
        assert row.params == {"channel": "C1", "text": "owed"}


async def test_a_restarted_sender_takes_back_what_it_held(new_store: StoreFactory) -> None:
    async with new_store() as killed:
        await killed.put_outbox([post("owed")])
        await killed.claim_outbox("local", limit=10, lease=LEASE)
    async with new_store() as restarted:
        assert await restarted.claim_outbox("local", limit=10, lease=LEASE) == []
        assert await restarted.release_outbox("local") == 1
        assert len(await restarted.claim_outbox("local", limit=10, lease=LEASE)) == 1


async def test_a_renewed_claim_outlives_its_first_lease_and_only_its_holder_renews(
    store: Store, clock: Clock
) -> None:
    [row_id] = await store.put_outbox([post("slow")])
    await store.claim_outbox("a", limit=10, lease=LEASE)
    clock.advance(seconds=20)
    await store.renew_outbox("a", [row_id], LEASE)
    await store.renew_outbox("b", [row_id], timedelta(hours=1))  # not b's: no effect
    clock.advance(seconds=20)  # 40 s after the claim, 20 s after the renewal
    assert await store.claim_outbox("b", limit=10, lease=LEASE) == []
    clock.advance(seconds=11)
    assert len(await store.claim_outbox("b", limit=10, lease=LEASE)) == 1
