"""The contract of compaction summaries: stored once, append-only, and where a run loads from."""

from __future__ import annotations

import asyncio

import pytest

from agent_core import ChatMessage, Summary
from bot.store import Store, StoreError, UnknownSession

from .conftest import StoreFactory


def _history(n: int) -> list[ChatMessage]:
    return [
        ChatMessage.user(f"q{i}") if i % 2 == 0 else ChatMessage.assistant(f"a{i}")
        for i in range(n)
    ]


async def test_a_run_loads_from_the_latest_summary_and_the_history_stays_whole(
    store: Store,
) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    history = _history(10)
    await store.append_messages(session.id, history)
    loaded = await store.load_context(session.id)
    assert (loaded.summary, loaded.messages, loaded.start) == (None, history, 0)

    assert await store.save_summary(session.id, Summary(4, "first four", "summary"))
    assert await store.save_summary(session.id, Summary(6, "first six", "note"))
    loaded = await store.load_context(session.id)
    assert loaded.summary == Summary(6, "first six", "note")
    assert loaded.messages == history[6:]
    assert loaded.start == 6
    assert await store.load_messages(session.id) == history  # nothing rewritten or dropped

    await store.append_messages(session.id, [ChatMessage.user("later")])
    assert (await store.load_context(session.id)).messages == [
        *history[6:],
        ChatMessage.user("later"),
    ]
    assert (await store.load_context("unknown")).messages == []


async def test_a_summary_that_does_not_reach_further_is_refused(store: Store) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    await store.append_messages(session.id, _history(8))
    assert await store.save_summary(session.id, Summary(6, "six"))
    assert not await store.save_summary(session.id, Summary(6, "six again"))
    assert not await store.save_summary(session.id, Summary(4, "four"))
    assert (await store.load_context(session.id)).summary == Summary(6, "six")


async def test_a_summary_past_the_history_or_of_no_session_writes_nothing(store: Store) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    await store.append_messages(session.id, _history(3))
    with pytest.raises(StoreError, match="does not fit"):
        await store.save_summary(session.id, Summary(4, "too far"))
    with pytest.raises(UnknownSession):
        await store.save_summary("ghost", Summary(1, "nobody"))
    assert (await store.load_context(session.id)).summary is None


async def test_of_racing_compactions_across_two_stores_one_summary_is_stored(
    new_store: StoreFactory,
) -> None:
    async with new_store() as a, new_store() as b:
        session = await a.get_or_create_session("T1", "C1", "1.0")
        await a.append_messages(session.id, _history(12))
        wins = await asyncio.gather(
            *(s.save_summary(session.id, Summary(8, f"by {i}")) for i, s in enumerate([a, b] * 3))
        )
        assert wins.count(True) == 1
        loaded = await b.load_context(session.id)
    assert loaded.summary is not None and loaded.summary.upto == 8
    assert loaded.messages == _history(12)[8:]
