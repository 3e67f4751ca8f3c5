"""The contract of the inbox: a delivery is saved (deduplicated) before Slack gets its 200, and
the rows a dead process left unprocessed are claimed once at start-up (docs/architecture.md)."""

from __future__ import annotations

import asyncio

from bot.store import Store

from .conftest import StoreFactory

MENTION = {
    "team": "T1",
    "channel": "C1",
    "thread_ts": "1.0",
    "user": "U1",
    "text": "hi",
    "ts": "1.0",
}


async def test_a_delivery_is_saved_once_per_key(store: Store) -> None:
    first = await store.inbox_add("message", MENTION, keys=["Ev1", "message:C1:1.0"])
    assert first is not None
    # The same message again (as `app_mention` then `message`): one key repeats, nothing saved.
    assert await store.inbox_add("message", MENTION, keys=["Ev2", "message:C1:1.0"]) is None
    # ... and the refused add claimed none of its keys: Ev2 is still unseen.
    assert await store.first_sighting("Ev2")
    assert not await store.first_sighting("Ev1")
    second = await store.inbox_add("slash", {"text": "deploy"})
    assert second is not None and second > first


async def test_rows_left_unprocessed_are_recovered_in_order_with_their_payload(
    new_store: StoreFactory,
) -> None:
    async with new_store() as dead:
        a = await dead.inbox_add("message", MENTION, keys=["EvA"])
        b = await dead.inbox_add("slash", {"channel": "C1", "text": "restart api"})
        c = await dead.inbox_add("message", {**MENTION, "ts": "2.0"})
        assert a is not None and b is not None and c is not None
        await dead.inbox_done(b)
    async with new_store() as survivor:
        recovered = await survivor.inbox_recover()
        assert [(i.id, i.kind, i.payload) for i in recovered] == [
            (a, "message", MENTION),
            (c, "message", {**MENTION, "ts": "2.0"}),
        ]
        assert await survivor.inbox_recover() == []  # claimed: not handed out twice


async def test_concurrent_recoveries_claim_each_row_once(new_store: StoreFactory) -> None:
    async with new_store() as dead:
        added = [await dead.inbox_add("message", {**MENTION, "ts": f"{n}.0"}) for n in range(20)]
    async with new_store() as one, new_store() as two, new_store() as three:
        claims = await asyncio.gather(*(s.inbox_recover() for s in (one, two, three)))
    ids = [item.id for claim in claims for item in claim]
    assert sorted(ids) == sorted(i for i in added if i is not None)
    assert len(ids) == len(set(ids)) == 20


async def test_a_burst_saved_together_is_deduplicated_delivery_by_delivery(
    new_store: StoreFactory,
) -> None:
    """Deliveries arriving at once share transactions (group commit); each still claims its
    keys alone: a repeat inside the burst is refused and claims none of its other keys."""
    async with new_store() as dead:
        burst = [
            dead.inbox_add("message", {**MENTION, "ts": f"{n}.0"}, keys=[f"Ev{n}", f"m:{n}"])
            for n in range(30)
        ]
        # The same messages again, under new event ids (as `message` after `app_mention`).
        burst += [
            dead.inbox_add("message", {**MENTION, "ts": f"{n}.0"}, keys=[f"EvAgain{n}", f"m:{n}"])
            for n in range(0, 30, 3)
        ]
        ids = await asyncio.gather(*burst)
        saved = [i for i in ids if i is not None]
        assert len(saved) == len(set(saved)) == 30
        assert ids[:30] == saved  # the first sighting of each message is the one saved
        assert all(
            await asyncio.gather(*(dead.first_sighting(f"EvAgain{n}") for n in range(0, 30, 3)))
        )
    async with new_store() as survivor:
        recovered = await survivor.inbox_recover()
        assert sorted(item.payload["ts"] for item in recovered) == sorted(
            f"{n}.0" for n in range(30)
        )


async def test_a_refused_delivery_leaves_its_new_keys_to_the_next_in_its_group(
    store: Store,
) -> None:
    """The group's keys are claimed together; the result is as if each delivery had claimed its
    own alone, in order: a refused one takes none, a key named twice goes to the first."""
    assert await store.inbox_add("message", MENTION, keys=["EvSeen"]) is not None
    blocker, refused, after, first, second = await asyncio.gather(
        store.inbox_add("message", {**MENTION, "ts": "1.5"}, keys=["EvBlock"]),
        store.inbox_add("message", {**MENTION, "ts": "2.0"}, keys=["EvNew", "EvSeen"]),
        store.inbox_add("message", {**MENTION, "ts": "3.0"}, keys=["EvNew"]),
        store.inbox_add("message", {**MENTION, "ts": "4.0"}, keys=["EvTwice", "EvFour"]),
        store.inbox_add("message", {**MENTION, "ts": "5.0"}, keys=["EvTwice", "EvFive"]),
    )
    assert refused is None and second is None
    assert None not in (blocker, after, first)
    assert not await store.first_sighting("EvNew") and not await store.first_sighting("EvFour")
    assert await store.first_sighting("EvFive")  # the refused one's other key was released


async def test_each_delivery_of_a_group_gets_the_id_of_its_own_row(
    new_store: StoreFactory,
) -> None:
    """A group's rows are inserted together: each caller's id is the row holding its payload
    (rows holding the same are interchangeable), also for text saved with replacements."""
    payloads = [{**MENTION, "ts": f"{n}.0", "text": f"n{n} \ud800"} for n in range(12)]
    payloads += [{**MENTION, "ts": "same"}] * 3
    async with new_store() as dead:
        ids = await asyncio.gather(
            dead.inbox_add("slash", {"text": "first, alone"}),
            *(dead.inbox_add("message", p, keys=[f"k{n}"]) for n, p in enumerate(payloads)),
        )
    async with new_store() as survivor:
        held = {item.id: item.payload for item in await survivor.inbox_recover()}
    assert len(set(ids)) == len(ids) == len(held)
    assert held[ids[0]] == {"text": "first, alone"}
    for item_id, payload in zip(ids[1:], payloads, strict=True):
        assert held[item_id] == {**payload, "text": payload["text"].replace("\ud800", "\ufffd")}
