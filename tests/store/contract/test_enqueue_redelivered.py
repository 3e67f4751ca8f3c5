"""A message's delivery processed a second time (its process died after queueing it, before
marking the delivery done, and a survivor processes it again) is not a second request: the
store hands back the message's item, whatever became of it, and queues nothing."""

from __future__ import annotations

from bot.store import Store

from .conftest import StoreFactory


async def test_a_message_queued_again_after_its_run_is_not_run_twice(
    new_store: StoreFactory,
) -> None:
    async with new_store() as dead, new_store() as survivor:
        session = await dead.get_or_create_session("T1", "C1", "1.0")
        first = await dead.enqueue(session.id, requester="U1", text="q", message_ts="1.0")
        assert first.item is not None
        started = await dead.claim_queued("C1", limit=5)
        assert started is not None and started.id == first.item.id
        assert await dead.end_run(session.id)
        await dead.finish_queued(started.id)
        # The survivor processes the same delivery again: the session is idle, nothing queued.
        again = await survivor.enqueue(session.id, requester="U1", text="q", message_ts="1.0")
        assert again.item is not None and again.item.id == first.item.id
        assert again.item.state == "done"
        assert await survivor.claim_queued("C1", limit=5) is None


async def test_another_message_of_the_thread_is_still_queued(store: Store) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    first = await store.enqueue(session.id, requester="U1", text="q", message_ts="1.0")
    started = await store.claim_queued("C1", limit=5)
    assert first.item is not None and started is not None
    assert await store.end_run(session.id)
    await store.finish_queued(started.id)
    second = await store.enqueue(session.id, requester="U1", text="more", message_ts="2.0")
    assert second.item is not None and second.item.id != first.item.id
    assert second.item.state == "queued"
