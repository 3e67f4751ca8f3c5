"""The whole agent over real HTTP: approval pause and resume, and the history the provider gets.

A provider answers HTTP 400 to a history where an assistant `tool_calls` id is not answered by
exactly one `tool` message right after it; these tests check the bodies the stand-in received.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from agent_core import (
    AgentResponseUpdate,
    AgentRunOptions,
    AgentSession,
    ApprovalRequiredTool,
    ChatClientAgent,
    Finish,
    FinishReason,
    InMemorySessionStore,
    TextDelta,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallHeld,
    ToolResult,
    tool,
)
from agent_core.openai import OpenAIChatClient
from tests.support.llm_server import LLMStandIn

GATED_ID = "call_restart_1"
SIBLING_ID = "call_status_2"
BATCH: list[tuple[str, str, dict[str, Any] | str]] = [
    (GATED_ID, "restart_service", {"service": "web"}),
    (SIBLING_ID, "service_status", {"service": "db"}),
]


class Ops:
    """Tools that record what really ran, in order."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @tool
        def restart_service(service: str) -> str:
            """Restart a service."""
            self.ran.append(f"restart {service}")
            return f"{service} restarted"

        @tool
        def service_status(service: str) -> str:
            """Show whether a service is running."""
            self.ran.append(f"status {service}")
            return f"{service}: running"

        self.tools = [ApprovalRequiredTool(restart_service), service_status]


async def collect(stream: AsyncIterator[AgentResponseUpdate]) -> list[AgentResponseUpdate]:
    return [update async for update in stream]


def assert_provider_accepts(messages: list[dict[str, Any]]) -> None:
    """The rules OpenAI enforces on a history (it answers HTTP 400 otherwise)."""
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message["role"] != "tool", f"tool message #{index} answers no call: {message}"
        calls = message.get("tool_calls") or []
        if message["role"] == "assistant" and calls:
            ids = [call["id"] for call in calls]
            assert len(set(ids)) == len(ids), f"repeated call ids: {ids}"
            for call in calls:
                assert call["type"] == "function"
                assert isinstance(call["function"]["arguments"], str)
            answers = messages[index + 1 : index + 1 + len(ids)]
            assert [m["role"] for m in answers] == ["tool"] * len(ids), answers
            assert [m["tool_call_id"] for m in answers] == ids
            index += 1 + len(ids)
        else:
            index += 1


async def pause_on_mixed_batch(
    llm: LLMStandIn, http: httpx.AsyncClient
) -> tuple[ChatClientAgent, AgentSession, Ops, InMemorySessionStore]:
    """Runs the first turn: the model asks for a gated call and an ungated sibling."""
    ops = Ops()
    store = InMemorySessionStore()
    client = OpenAIChatClient(http, model="gpt-test", base_url=llm.base_url, api_key="sk-test")
    agent = ChatClientAgent(client, instructions="You run ops tasks.", tools=ops.tools, store=store)
    session = AgentSession("T1:C1:1700000000.000100")

    llm.reply_tool_calls(BATCH, text="Let me check.")
    updates = await collect(agent.run("restart web and check db", session))

    requests = [u for u in updates if isinstance(u, ToolApprovalRequest)]
    held = [u for u in updates if isinstance(u, ToolCallHeld)]
    assert [(r.call_id, r.name, r.arguments) for r in requests] == [
        (GATED_ID, "restart_service", {"service": "web"})
    ]
    assert [(h.call_id, h.name, h.arguments) for h in held] == [
        (SIBLING_ID, "service_status", {"service": "db"})
    ]
    assert updates[-1] == Finish(FinishReason.AWAITING_APPROVAL, updates[-1].usage)
    assert not any(isinstance(u, ToolResult) for u in updates)
    assert ops.ran == []  # nothing in the batch runs before the decision

    (first,) = await llm.wait_for_requests(1)
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert [t["function"]["name"] for t in first["tools"]] == ["restart_service", "service_status"]
    stored = await store.load_messages(session.id)
    assert stored[-1].role == "assistant"
    assert [c.id for c in stored[-1].tool_calls] == [GATED_ID, SIBLING_ID]
    return agent, session, ops, store


async def test_approved_batch_runs_both_and_history_is_valid(
    llm: LLMStandIn, http: httpx.AsyncClient
) -> None:
    agent, session, ops, _ = await pause_on_mixed_batch(llm, http)

    llm.reply_text("Restarted web; db is running.")
    options = AgentRunOptions().with_tool_approval_responses(
        [ToolApprovalResponse.approve(GATED_ID, decided_by="U123")]
    )
    updates = await collect(agent.run(None, session, options))

    results = [u for u in updates if isinstance(u, ToolResult)]
    assert [(r.call_id, r.content, r.is_error) for r in results] == [
        (GATED_ID, "web restarted", False),
        (SIBLING_ID, "db: running", False),
    ]
    assert ops.ran == ["restart web", "status db"]  # the model's order
    assert "".join(u.text for u in updates if isinstance(u, TextDelta)) == (
        "Restarted web; db is running."
    )
    assert updates[-1].kind == "finish" and updates[-1].finish_reason is FinishReason.STOP

    _, second = await llm.wait_for_requests(2)
    messages = second["messages"]
    assert_provider_accepts(messages)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assistant = messages[2]
    assert assistant["content"] == "Let me check."
    assert [c["id"] for c in assistant["tool_calls"]] == [GATED_ID, SIBLING_ID]
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == [
        '{"service": "web"}',
        '{"service": "db"}',
    ]
    assert messages[3] == {"role": "tool", "content": "web restarted", "tool_call_id": GATED_ID}
    assert messages[4] == {"role": "tool", "content": "db: running", "tool_call_id": SIBLING_ID}
    assert llm.headers[1]["Authorization"] == "Bearer sk-test"


async def test_rejected_call_is_answered_with_reason_and_sibling_still_runs(
    llm: LLMStandIn, http: httpx.AsyncClient
) -> None:
    agent, session, ops, store = await pause_on_mixed_batch(llm, http)

    llm.reply_text("Understood, I did not restart web.")
    options = AgentRunOptions().with_tool_approval_responses(
        [ToolApprovalResponse.reject(GATED_ID, "not during business hours")]
    )
    updates = await collect(agent.run(None, session, options))

    assert ops.ran == ["status db"]
    results = {u.call_id: u.content for u in updates if isinstance(u, ToolResult)}
    assert results == {
        GATED_ID: "Rejected: not during business hours",
        SIBLING_ID: "db: running",
    }
    assert updates[-1].kind == "finish" and updates[-1].finish_reason is FinishReason.STOP

    _, second = await llm.wait_for_requests(2)
    messages = second["messages"]
    assert_provider_accepts(messages)
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert tool_messages == [
        {
            "role": "tool",
            "content": "Rejected: not during business hours",
            "tool_call_id": GATED_ID,
        },
        {"role": "tool", "content": "db: running", "tool_call_id": SIBLING_ID},
    ]
    stored = await store.load_messages(session.id)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool", "assistant"]
    assert stored[-1].content == "Understood, I did not restart web."


async def test_provider_error_during_resume_is_reported_not_raised(
    llm: LLMStandIn, http: httpx.AsyncClient
) -> None:
    agent, session, ops, _ = await pause_on_mixed_batch(llm, http)

    llm.fail_midstream("Restarted w", message="upstream went away")
    options = AgentRunOptions().with_tool_approval_responses(
        [ToolApprovalResponse.approve(GATED_ID)]
    )
    updates = await collect(agent.run(None, session, options))

    assert ops.ran == ["restart web", "status db"]
    final = updates[-1]
    assert isinstance(final, Finish) and final.finish_reason is FinishReason.ERROR
    assert final.error is not None and "upstream went away" in final.error
    assert len(llm.requests) == 2  # a failure after the stream started is never retried
