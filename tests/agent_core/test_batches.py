"""Closing a batch (every unanswered call of the latest assistant message gets one `tool`
message) and the one "is the batch decided?" predicate."""

from __future__ import annotations

from agent_core import (
    CallOutcome,
    Cancelled,
    ChatMessage,
    Interrupted,
    NotRun,
    ToolCall,
    close_batch,
    pending_tool_calls,
    render_outcome,
    undecided_calls,
)
from agent_core.testing import call, history_problems

OLD = call("c_old", "status", service="db")
OLD_OTHER = call("c_old2", "status", service="cache")
A = call("c_a", "deploy", service="api")
B = call("c_b", "status", service="api")
C = call("c_c", "scale", service="api", replicas=3)


def history(*answered: str) -> list[ChatMessage]:
    """An older batch with one call left unanswered, then a latest batch A, B, C of which
    `answered` already have results."""
    return [
        ChatMessage.user("hi"),
        ChatMessage.assistant(None, (OLD, OLD_OTHER)),
        ChatMessage.tool("db is up", "c_old"),
        ChatMessage.assistant("On it.", (A, B, C)),
        *(ChatMessage.tool("done", call_id) for call_id in answered),
    ]


def test_close_batch_answers_only_unanswered_calls_of_the_latest_batch_in_order() -> None:
    messages = history("c_b")
    asked: list[str] = []

    def outcome_for(tool_call: ToolCall) -> CallOutcome:
        asked.append(tool_call.id)
        return Cancelled("U1") if tool_call.name == "deploy" else NotRun("U1")

    closing = close_batch(messages, outcome_for)

    assert asked == ["c_a", "c_c"]  # not c_b (answered), not c_old2 (an older batch)
    assert closing == [
        ChatMessage.tool("Rejected: cancelled by U1", "c_a"),
        ChatMessage.tool("Not run: the run was cancelled by U1", "c_c"),
    ]
    # Once closed, the latest batch has no pending call and is answered in the model's order.
    closed = [*messages, *closing]
    assert pending_tool_calls(closed) == []
    assert [m.tool_call_id for m in closed[4:]] == ["c_b", "c_a", "c_c"]


def test_close_batch_renders_each_outcome_through_render_outcome() -> None:
    (message,) = close_batch(history("c_a", "c_b"), lambda _: Interrupted())
    assert message == ChatMessage.tool(render_outcome(Interrupted()), "c_c")


def test_close_batch_of_a_fully_answered_batch_or_no_batch_is_empty() -> None:
    def never(tool_call: ToolCall) -> CallOutcome:
        raise AssertionError(f"asked about {tool_call.id!r}")

    assert close_batch(history("c_a", "c_b", "c_c"), never) == []
    assert close_batch([ChatMessage.user("hi"), ChatMessage.assistant("hello")], never) == []
    assert close_batch([], never) == []


def test_a_closed_history_is_one_a_provider_accepts() -> None:
    messages = [ChatMessage.user("hi"), ChatMessage.assistant(None, (A, B))]
    closed = [*messages, *close_batch(messages, lambda _: NotRun())]
    assert history_problems(closed) == []
    assert history_problems(messages) != []


def test_pending_tool_calls_are_the_latest_batchs_unanswered_calls() -> None:
    assert pending_tool_calls(history()) == [A, B, C]
    assert pending_tool_calls(history("c_c", "c_a")) == [B]
    assert pending_tool_calls(history("c_a", "c_b", "c_c")) == []


def test_undecided_calls_keeps_the_gated_order_and_ignores_extra_decisions() -> None:
    assert undecided_calls(["c_a", "c_b", "c_c"], []) == ["c_a", "c_b", "c_c"]
    assert undecided_calls(["c_a", "c_b", "c_c"], ["c_b"]) == ["c_a", "c_c"]
    assert undecided_calls(["c_a", "c_b"], iter(["c_b", "c_a", "c_x"])) == []
    assert undecided_calls([], ["c_a"]) == []  # no gated calls: decided, callers check this
