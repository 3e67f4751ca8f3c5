"""Runs cut by a crash before any call ran: asked again from their stored history, once.

The decision (`runs_again`) and its place in start-up recovery (`Store.requeue_interrupted`):
a run whose message is stored and whose model request was in flight goes back to the queue with
its history kept, the claim that starts it says `rerun`, and the agent answers what is stored
(`ChatClientAgent.run_again`); a run with a call that reached `executing`, a paused run and a
stored answer keep the restart's notice.
"""

from __future__ import annotations

import asyncio

import pytest

from agent_core import (
    AgentSession,
    ChatClientAgent,
    ChatMessage,
    ResumeError,
    ToolApprovalRequest,
    call_digest,
)
from bot.store import QueueItem, Store
from bot.store.rules import runs_again
from tests.support.scripted import ScriptedChatClient, Turn, collect

from .conftest import StoreFactory
from .helpers import RESTART, STATUS

QUESTION = "how full is the disk on db-1?"


async def _cut(store: Store, thread: str = "1.0", text: str = QUESTION) -> QueueItem:
    """A queued run that started and stored its message; the process dies with the model
    request in flight."""
    session = await store.get_or_create_session("T1", "C1", thread)
    assert (await store.enqueue(session.id, requester="U1", text=text)).item is not None
    item = await store.claim_queued("C1", limit=5)
    assert item is not None and item.session_id == session.id and not item.rerun
    await store.append_messages(session.id, [ChatMessage.user(text)])
    return item


@pytest.mark.parametrize(
    ("state", "tail", "started", "again"),
    [
        ("running", ["user"], False, True),  # the model was being asked
        ("running", ["user", "assistant+calls", "tool"], False, True),  # a call answered unrun
        ("running", ["user"], True, False),  # a call reached executing: never run twice
        ("running", ["user", "assistant+calls"], False, False),  # its calls never answered
        ("running", ["user", "assistant"], False, False),  # answered; the outbox shows it
        ("awaiting_approval", ["user", "assistant+calls"], False, False),  # paused
        ("running", [], False, False),  # nothing stored: it had not begun
    ],
)
def test_which_cut_runs_run_again(state: str, tail: list[str], started: bool, again: bool) -> None:
    messages = {
        "user": ChatMessage.user(QUESTION),
        "assistant": ChatMessage.assistant("40% full."),
        "assistant+calls": ChatMessage.assistant(None, (STATUS,)),
        "tool": ChatMessage.tool("Error: unknown tool", STATUS.id),
    }
    assert runs_again(state, [messages[m] for m in tail], started) is again


async def test_a_run_cut_with_its_model_request_in_flight_runs_again_once(
    new_store: StoreFactory,
) -> None:
    async with new_store() as dead:
        item = await _cut(dead)
    async with new_store() as one, new_store() as two:
        found = await asyncio.gather(one.requeue_interrupted(), two.requeue_interrupted())
        assert sorted(len(items) for items in found) == [0, 1]  # one store requeues it
        [requeued] = [i for items in found for i in items]
        assert (requeued.id, requeued.state, requeued.history_seq) == (item.id, "queued", 0)
        assert await one.recover() == [] and await two.recover() == []  # nobody is told
        claims = await asyncio.gather(
            one.claim_queued("C1", limit=1), two.claim_queued("C1", limit=1)
        )
        [claimed] = [c for c in claims if c is not None]
        assert claimed.id == item.id and claimed.rerun and claimed.history_seq == 0

        client = ScriptedChatClient(Turn(text="db-1 is 40% full."))
        agent = ChatClientAgent(client, store=one)
        await collect(agent.run_again(AgentSession(item.session_id)))
        assert [m.role for m in client.requests[0].messages] == ["user"]  # not asked twice
        assert await one.load_messages(item.session_id) == [
            ChatMessage.user(QUESTION),
            ChatMessage.assistant("db-1 is 40% full."),
        ]
        with pytest.raises(ResumeError):  # answered: nothing left to ask
            await collect(agent.run_again(AgentSession(item.session_id)))
        events = [row.event for row in await one.audit_rows()]
        assert events.count("run_requeued") == 1


async def test_a_rerun_released_at_shutdown_keeps_its_stored_message(store: Store) -> None:
    item = await _cut(store)
    [requeued] = await store.requeue_interrupted()
    claimed = await store.claim_queued("C1", limit=1)
    assert claimed is not None and claimed.rerun
    await store.release_queued(claimed.id)  # the process stopped before the run started
    again = await store.claim_queued("C1", limit=1)
    assert again is not None and again.id == item.id and again.rerun
    assert again.history_seq == requeued.history_seq == 0


async def test_a_run_whose_call_began_is_not_run_again(store: Store) -> None:
    item = await _cut(store)
    await store.append_messages(item.session_id, [ChatMessage.assistant(None, (STATUS,))])
    await store.start_tool_call(item.session_id, STATUS)  # it may have had effects
    assert await store.requeue_interrupted() == []
    [recovered] = await store.recover()  # the thread is told, as before
    assert [c.call_id for c in recovered.interrupted] == [STATUS.id]
    assert [i.state for i in await store.queue_items()] == ["done"]


async def test_a_paused_run_and_a_stored_answer_are_not_run_again(store: Store) -> None:
    answered = await _cut(store, thread="2.0")
    await store.append_messages(answered.session_id, [ChatMessage.assistant("40% full.")])
    paused = await _cut(store, thread="3.0")
    arguments = RESTART.parsed_arguments()
    request = ToolApprovalRequest(
        RESTART.id, RESTART.name, arguments, "desc", call_digest(RESTART.name, arguments)
    )
    message = ChatMessage.assistant(None, (RESTART,))
    await store.record_pause(paused.session_id, message, [request], [])
    assert await store.requeue_interrupted() == []
    session = await store.get_session(paused.session_id)
    assert session is not None and session.state == "awaiting_approval"
    assert [i.state for i in await store.queue_items()] == ["done", "done"]


async def test_a_message_left_without_its_mark_is_known_to_its_rerun(
    new_store: StoreFactory,
) -> None:
    """The mark's budget was spent when the run started (a storm): after the crash its rerun
    marks the message afresh, and once it has, a second crash's recovery removes it."""
    async with new_store() as dead:
        item = await _cut(dead)
        await dead.queue_unmarked(item.id, True)
    async with new_store() as alive:
        [requeued] = await alive.requeue_interrupted()
        assert requeued.unmarked
        claimed = await alive.claim_queued("C1", limit=1)
        assert claimed is not None and claimed.rerun and claimed.unmarked
        await alive.queue_unmarked(claimed.id, False)
        [started] = await alive.queue_items(states=["started"])
        assert not started.unmarked
