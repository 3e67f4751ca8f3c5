"""The contract of the AI-app container's conversations: the channel each one's user
looks at is in the database, so a restart and every process on it see the last change, and
exactly one run of a conversation names it."""

from __future__ import annotations

import asyncio

from bot.store import Store

from .conftest import StoreFactory

THREAD = ("T1", "D0ALICE", "1700000100.000001")


async def test_a_thread_outside_the_container_has_no_row_and_is_never_pinned(
    store: Store,
) -> None:
    assert await store.assistant_thread(*THREAD) is None
    assert not await store.pin_assistant_run(*THREAD, run_channel="C0DB")
    assert await store.assistant_thread(*THREAD) is None


async def test_the_last_channel_looked_at_wins(store: Store) -> None:
    await store.note_assistant_thread(*THREAD, viewing="C0OPS")
    await store.note_assistant_thread(*THREAD, viewing="C0DB")
    found = await store.assistant_thread(*THREAD)
    assert found is not None and found.viewing_channel == "C0DB"
    assert found.run_channel is None and found.titled_at is None
    await store.note_assistant_thread(*THREAD, viewing=None)
    found = await store.assistant_thread(*THREAD)
    assert found is not None and found.viewing_channel is None
    assert await store.assistant_thread("T1", "D0ALICE", "1700000100.000002") is None


async def test_the_first_run_names_the_conversation_and_pins_its_channel(store: Store) -> None:
    await store.note_assistant_thread(*THREAD, viewing="C0DB")
    assert await store.pin_assistant_run(*THREAD, run_channel="C0DB")
    # The user moves on; the next run pins the new channel, and names nothing again.
    await store.note_assistant_thread(*THREAD, viewing="C0OPS")
    assert not await store.pin_assistant_run(*THREAD, run_channel="C0OPS")
    found = await store.assistant_thread(*THREAD)
    assert found is not None
    assert (found.viewing_channel, found.run_channel) == ("C0OPS", "C0OPS")
    assert found.titled_at is not None


async def test_another_store_and_a_restart_see_the_change(new_store: StoreFactory) -> None:
    async with new_store() as first, new_store() as second:
        await first.note_assistant_thread(*THREAD, viewing="C0OPS")
        await second.note_assistant_thread(*THREAD, viewing="C0DB")
        found = await first.assistant_thread(*THREAD)
        assert found is not None and found.viewing_channel == "C0DB"
        titled = await asyncio.gather(
            first.pin_assistant_run(*THREAD, run_channel="C0DB"),
            second.pin_assistant_run(*THREAD, run_channel="C0DB"),
        )
        assert sorted(titled) == [False, True]
    async with new_store() as restarted:
        found = await restarted.assistant_thread(*THREAD)
        assert found is not None
        assert (found.viewing_channel, found.run_channel) == ("C0DB", "C0DB")
