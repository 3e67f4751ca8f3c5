"""The contract of crash recovery, reopening, and a whole pause and resume through the agent."""

from __future__ import annotations

import asyncio

import pytest

from agent_core import (
    AgentRunOptions,
    AgentSession,
    ChatClientAgent,
    ChatMessage,
    Finish,
    FinishReason,
    Interrupted,
    NotRun,
    ResumeError,
    ToolApprovalRequest,
    ToolCallAlreadyStarted,
    ToolResult,
    pending_tool_calls,
    render_outcome,
    tool,
)
from bot.store import Ruling, Store, batch_complete
from tests.support.scripted import ScriptedChatClient, Turn, collect, history_problems
from tests.support.store_helpers import begin_run

from .conftest import StoreFactory
from .helpers import DROP, RESTART, STATUS, mention, paused_session

INTERRUPTED = render_outcome(Interrupted())
NOT_RUN = render_outcome(NotRun())


async def test_recover_interrupts_executing_calls_and_answers_the_rest(
    new_store: StoreFactory,
) -> None:
    async with new_store(person=mention) as store:
        session_id, rows = await paused_session(store)
        waiting_id, _ = await paused_session(store, thread="2.0")
        await store.decide(rows[0].id, "approved", user_id="U1")
        await store.decide(rows[2].id, "rejected", user_id="U1")
        assert await store.claim_resume(session_id)
        await store.resume_started(session_id)
        await store.start_tool_call(session_id, RESTART)
        # The process dies here: RESTART was running, STATUS and DROP never got an answer.

    async with new_store(person=mention) as store:
        recovered = await store.recover()
        assert [r.session.id for r in recovered] == [session_id]
        assert recovered[0].session.state == "idle"
        assert [r.id for r in recovered[0].interrupted] == [rows[0].id]
        assert recovered[0].interrupted[0].status == "interrupted"
        assert recovered[0].not_run == [STATUS.id, DROP.id]

        history = await store.load_messages(session_id)
        assert history_problems(history) == []
        assert pending_tool_calls(history) == []
        assert [(m.tool_call_id, m.content) for m in history[-3:]] == [
            (RESTART.id, INTERRUPTED),
            (STATUS.id, NOT_RUN),
            (DROP.id, NOT_RUN),
        ]
        with pytest.raises(ToolCallAlreadyStarted) as again:
            await store.start_tool_call(session_id, RESTART)
        assert again.value.status == "interrupted"

        waiting = await store.get_session(waiting_id)
        assert waiting is not None and waiting.state == "awaiting_approval"
        assert {r.status for r in await store.batch_calls(waiting_id)} == {"pending"}

        interrupted = [r for r in await store.audit_rows() if r.event == "interrupted"]
        assert [(r.call_id, r.actor) for r in interrupted] == [(RESTART.id, None)]
        assert await store.recover() == []  # nothing left to repair


async def test_recover_ends_crashed_runs_with_no_executing_call(store: Store) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    assert await begin_run(store, session.id)
    # A round that did not pause: its assistant message is stored, no call had started yet.
    await store.append_messages(
        session.id, [ChatMessage.user("status?"), ChatMessage.assistant(None, (STATUS,))]
    )
    quiet = await store.get_or_create_session("T1", "C1", "2.0")
    assert await begin_run(store, quiet.id)

    recovered = await store.recover()
    by_id = {r.session.id: r for r in recovered}
    assert set(by_id) == {session.id, quiet.id}
    assert by_id[session.id].not_run == [STATUS.id]
    assert by_id[session.id].interrupted == []
    assert by_id[quiet.id].not_run == []
    history = await store.load_messages(session.id)
    assert history[-1] == ChatMessage.tool(NOT_RUN, STATUS.id)
    assert history_problems(history) == []
    assert {r.session.state for r in recovered} == {"idle"}


# -- reopening ------------------------------------------------------------------------------------


async def test_reopening_returns_the_same_sessions_messages_ledger_and_audit(
    new_store: StoreFactory,
) -> None:
    async with new_store(person=mention) as store:
        session_id, rows = await paused_session(store)
        await store.set_card(rows[0].id, "C1", "9.9")
        await store.decide(
            rows[0].id, "approved", user_id="U1", ruling=Ruling(required_approvals=2)
        )
        await store.audit("note", actor="U1", session_id=session_id, details={"k": [1, "ü"]})
        before = (
            await store.get_session(session_id),
            await store.load_messages(session_id),
            await store.batch_calls(session_id),
            await store.audit_rows(),
        )
    async with new_store(person=mention) as store:
        after = (
            await store.get_session(session_id),
            await store.load_messages(session_id),
            await store.batch_calls(session_id),
            await store.audit_rows(),
        )
    assert after == before
    assert before[2][0].approvals == ("U1",)
    assert before[3][-1].details == {"k": [1, "ü"]}


async def test_pause_and_resume_through_the_agent_across_a_restart(new_store: StoreFactory) -> None:
    ran: list[tuple[str, str]] = []
    seen_status: list[str] = []

    @tool(requires_approval=True)
    async def restart_service(service: str, force: bool = False) -> str:
        """Restart a service."""
        found = await observer.find_call(row.id, RESTART.id)  # as another process sees it
        seen_status.append("missing" if found is None else found.status)
        ran.append(("restart_service", service))
        return f"{service} restarted"

    @tool
    async def service_status(service: str) -> str:
        """Report a service's status."""
        ran.append(("service_status", service))
        return f"{service} is up"

    @tool(requires_approval=True)
    async def drop_cache(region: str) -> str:
        """Drop a cache."""
        ran.append(("drop_cache", region))
        return "dropped"

    tools = [restart_service, service_status, drop_cache]
    client = ScriptedChatClient(
        Turn(text="Restarting.", tool_calls=[RESTART, STATUS, DROP]),
        Turn(text="All done."),
    )

    async with new_store() as store:
        agent = ChatClientAgent(client, tools=tools, store=store)
        row = await store.get_or_create_session("T1", "C1", "1.0")
        await store.set_requester(row.id, "UREQ")
        assert await begin_run(store, row.id)
        updates = await collect(agent.run("restart api", AgentSession(row.id)))
        assert updates[-1] == Finish(FinishReason.AWAITING_APPROVAL, None)
        requests = [u for u in updates if isinstance(u, ToolApprovalRequest)]
        assert [r.call_id for r in requests] == [RESTART.id, DROP.id]
        assert ran == []
        batch = await store.batch_calls(row.id)
        assert [r.digest for r in batch if r.needs_approval] == [r.digest for r in requests]
        await store.decide(batch[0].id, "approved", user_id="UOPS")
        await store.decide(batch[2].id, "rejected", user_id="UOPS", reason="not today")

    # the bot restarted between the clicks and the resume; `observer` reads as another process
    async with new_store() as store, new_store() as observer:
        assert await store.recover() == []
        agent = ChatClientAgent(client, tools=tools, store=store)
        batch = await store.batch_calls(row.id)
        assert batch_complete(batch)
        assert await store.claim_resume(row.id)
        assert not await store.claim_resume(row.id)
        await store.resume_started(row.id)
        options = AgentRunOptions().with_tool_approval_responses(
            await store.responses_for_batch(row.id)
        )
        updates = await collect(agent.run(None, AgentSession(row.id), options))
        assert updates[-1] == Finish(FinishReason.STOP, None)
        results = {u.call_id: u.content for u in updates if isinstance(u, ToolResult)}
        assert results == {
            RESTART.id: "api restarted",
            STATUS.id: "api is up",
            DROP.id: "Rejected: not today (rejected by UOPS)",
        }
        assert ran == [("restart_service", "api"), ("service_status", "api")]
        assert seen_status == ["executing"]  # committed before the tool ran

        history = await store.load_messages(row.id)
        assert history_problems(history) == []
        assert history[-1] == ChatMessage.assistant("All done.")
        statuses = [(r.call_id, r.status) for r in await store.batch_calls(row.id)]
        assert statuses == [(RESTART.id, "done"), (STATUS.id, "done"), (DROP.id, "rejected")]

        with pytest.raises(ResumeError):  # a second resume finds nothing pending
            await collect(agent.run(None, AgentSession(row.id), options))
        assert ran == [("restart_service", "api"), ("service_status", "api")]
        events = [r.event for r in await store.audit_rows()]
    assert events == [
        "request",
        "request",
        "decision",
        "decision",
        "execution_start",
        "execution_end",
        "execution_start",
        "execution_end",
    ]


# -- approved but never started (docs/architecture.md) -------------------------------------------


@pytest.mark.parametrize("stage", ["claimed", "started"])
async def test_a_decided_batch_whose_resume_never_began_is_resumed_once_after_a_crash(
    new_store: StoreFactory, stage: str
) -> None:
    async with new_store() as dead:
        session_id, rows = await paused_session(dead)
        for row in rows:
            if row.needs_approval:
                await dead.decide(row.id, "approved", user_id="UAPP")
        assert await dead.claim_resume(session_id)
        if stage == "started":
            await dead.resume_started(session_id)
    async with new_store() as survivor, new_store() as other:
        assert await survivor.recover() == []  # not cut short: nothing of it ran
        session = await survivor.get_session(session_id)
        assert session is not None and session.state == "awaiting_approval"
        assert {r.status for r in await survivor.batch_calls(session_id)} == {
            "approved",
            "pending",  # the held sibling, run on resume
        }
        # The resume is claimable again, by exactly one store.
        claims = await asyncio.gather(
            survivor.claim_resume(session_id), other.claim_resume(session_id)
        )
        assert sorted(claims) == [False, True]
        audit = [r.event for r in await survivor.audit_rows()]
        assert "resume_reclaimed" in audit and "interrupted" not in audit


async def test_a_batch_with_a_call_that_began_is_not_resumed_again(store: Store) -> None:
    session_id, rows = await paused_session(store)
    for row in rows:
        if row.needs_approval:
            await store.decide(row.id, "approved", user_id="UAPP")
    assert await store.claim_resume(session_id)
    await store.resume_started(session_id)
    await store.start_tool_call(session_id, RESTART)
    [recovered] = await store.recover()
    assert [c.call_id for c in recovered.interrupted] == [RESTART.id]
    assert recovered.session.state == "idle"
