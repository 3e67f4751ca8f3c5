"""The contract of a held outbox row (an answer's ending): stored already claimed by the
process making its write, so no sender takes it while that process lives and holds it; its
restart (taking the same name) or the lapse of its lease hands it to a sender."""

from __future__ import annotations

from datetime import timedelta

from bot.store import OutboxEntry, Store

from .conftest import StoreFactory
from .helpers import Clock

LEASE = timedelta(seconds=30)


def ending(text: str) -> OutboxEntry:
    params = {"channel": "C1", "thread_ts": "1.0", "ts": "2.0", "text": text}
    return OutboxEntry("opsgate.answer_ending", params, 1, channel_id="C1", key=f"answer:{text}")


async def test_a_held_row_is_nobodys_until_its_holder_releases_it(
    store: Store, clock: Clock
) -> None:
    row_id = await store.hold_outbox(ending("whole"), "local", LEASE)
    assert await store.claim_outbox("local", limit=10, lease=LEASE) == []
    assert (await store.outbox_stats()).depth == {1: 1}
    await store.outbox_later(row_id, clock.now, "the reply could not finish")
    [row] = await store.claim_outbox("sender", limit=10, lease=LEASE)
    assert (row.id, row.params["text"], row.attempts) == (row_id, "whole", 1)


async def test_a_held_row_its_holder_finished_is_gone(store: Store) -> None:
    row_id = await store.hold_outbox(ending("shown"), "local", LEASE)
    await store.outbox_sent(row_id)
    assert (await store.outbox_stats()).depth == {}


async def test_a_dead_holders_row_goes_to_its_restart_or_after_its_lease(
    new_store: StoreFactory, clock: Clock
) -> None:
    async with new_store() as dead, new_store() as alive:
        await dead.hold_outbox(ending("restart"), "local", LEASE)
        await dead.hold_outbox(ending("lapse"), "replica-1", LEASE)
        assert await alive.release_outbox("local") == 1  # the restart takes its name again
        [restarted] = await alive.claim_outbox("local", limit=10, lease=LEASE)
        assert restarted.params["text"] == "restart"
        await alive.outbox_sent(restarted.id)
        assert await alive.claim_outbox("replica-2", limit=10, lease=LEASE) == []
        clock.advance(seconds=31)
        [lapsed] = await alive.claim_outbox("replica-2", limit=10, lease=LEASE)
        assert lapsed.params["text"] == "lapse"
