"""The contract of sessions, their run-state transitions and their history."""

from __future__ import annotations

import asyncio

import pytest

from agent_core import ChatMessage
from bot.store import InvalidTransition, Store, UnknownSession
from tests.support.store_helpers import begin_run

from .conftest import StoreFactory
from .helpers import RESTART, STATUS, T0, Clock, paused_session


async def test_one_thread_is_one_session(store: Store, clock: Clock) -> None:
    first = await store.get_or_create_session("T1", "C1", "1.0")
    clock.advance(seconds=5)
    again = await store.get_or_create_session("T1", "C1", "1.0")
    other = await store.get_or_create_session("T1", "C1", "2.0")
    assert again == first
    assert other.id != first.id
    assert first.state == "idle"
    assert first.created_at == T0
    assert await store.find_session("T1", "C1", "1.0") == first
    assert await store.find_session("T2", "C1", "1.0") is None
    assert await store.get_session("missing") is None


async def test_get_or_create_from_two_stores_at_once_gives_one_session(
    new_store: StoreFactory,
) -> None:
    async with new_store() as a, new_store() as b:
        rows = await asyncio.gather(
            *(s.get_or_create_session("T1", "C9", "5.5") for s in (a, b, a, b, a, b))
        )
    assert len({row.id for row in rows}) == 1


async def test_of_n_concurrent_resume_claims_across_two_stores_exactly_one_wins(
    new_store: StoreFactory,
) -> None:
    async with new_store() as a, new_store() as b:
        session_id, _ = await paused_session(a)
        results = await asyncio.gather(
            *((a if i % 2 else b).claim_resume(session_id) for i in range(20))
        )
        assert results.count(True) == 1
        row = await b.get_session(session_id)
    assert row is not None and row.state == "resuming"


async def test_of_concurrent_run_starts_across_two_stores_exactly_one_wins(
    new_store: StoreFactory,
) -> None:
    async with new_store() as a, new_store() as b:
        session = await a.get_or_create_session("T1", "C1", "1.0")
        results = await asyncio.gather(
            *(begin_run(a if i % 2 else b, session.id) for i in range(20))
        )
        assert results.count(True) == 1
        row = await b.get_session(session.id)
    assert row is not None and row.state == "running"


async def test_the_named_transitions_move_only_from_their_states(store: Store) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    assert not await store.end_run(session.id)  # idle: no run to end
    assert not await store.claim_resume(session.id)
    assert await begin_run(store, session.id)
    assert not await begin_run(store, session.id)  # one run per thread
    assert await store.end_run(session.id, failed=True, error="the model endpoint said 500")
    failed = await store.get_session(session.id)
    assert failed is not None
    assert (failed.state, failed.error) == ("failed", "the model endpoint said 500")
    assert await begin_run(store, session.id)  # a failed session takes a new message
    running = await store.get_session(session.id)
    assert running is not None and (running.state, running.error) == ("running", None)
    assert await store.end_run(session.id)
    idle = await store.get_session(session.id)
    assert idle is not None and (idle.state, idle.error) == ("idle", None)
    await store.set_requester(session.id, "U42")
    assert (await store.get_session(session.id)).requester == "U42"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="only for a failed run"):
        await store.end_run(session.id, error="no")
    with pytest.raises(UnknownSession, match="'nope'"):
        await begin_run(store, "nope")
    for step in (store.end_run, store.claim_resume, store.resume_started):
        with pytest.raises(UnknownSession, match="'nope'"):
            await step("nope")
    with pytest.raises(UnknownSession):
        await store.set_requester("nope", "U1")


async def test_a_resume_goes_from_the_pause_through_resuming_to_running(store: Store) -> None:
    session_id, _ = await paused_session(store)
    with pytest.raises(InvalidTransition, match=f"{session_id!r} is awaiting_approval"):
        await store.resume_started(session_id)
    assert not await begin_run(store, session_id)  # paused: a new message cannot start a run
    assert not await store.end_run(session_id)  # the pause is not ended by the run's end
    assert await store.claim_resume(session_id)
    assert not await store.claim_resume(session_id)
    await store.resume_started(session_id)
    row = await store.get_session(session_id)
    assert row is not None and row.state == "running"
    assert await store.end_run(session_id)


# -- messages -------------------------------------------------------------------------------------


async def test_messages_round_trip_in_order(store: Store) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    history = [
        ChatMessage.user("hi <@U1> & friends", name="alice"),
        ChatMessage.assistant(None, (RESTART, STATUS)),
        ChatMessage.tool("ok", RESTART.id),
        ChatMessage.tool("", STATUS.id),
        ChatMessage.assistant("done ✓"),
    ]
    await store.append_messages(session.id, history[:2])
    await store.append_messages(session.id, [])
    await store.append_messages(session.id, history[2:])
    assert await store.load_messages(session.id) == history
    assert await store.load_messages("unknown") == []


async def test_appending_to_an_unknown_session_fails_and_writes_nothing(
    store: Store,
) -> None:
    with pytest.raises(UnknownSession, match="'ghost'"):
        await store.append_messages("ghost", [ChatMessage.user("hello")])
    assert await store.load_messages("ghost") == []
