"""A batch is the tool calls of one assistant message. Providers answer HTTP 400 unless every
`tool_call_id` of it has exactly one `tool` message, so every path that ends a batch without
running it (resume, cancel, recovery after a crash) closes it here, and "is it decided?" is
asked here only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .messages import ChatMessage, ToolCall
from .outcomes import CallOutcome, render_outcome

__all__ = ["close_batch", "pending_tool_calls", "undecided_calls"]


def pending_tool_calls(messages: Sequence[ChatMessage]) -> list[ToolCall]:
    """Calls of the last assistant tool-call message that have no `tool` answer yet."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant" and message.tool_calls:
            answered = {m.tool_call_id for m in messages[index + 1 :] if m.role == "tool"}
            return [call for call in message.tool_calls if call.id not in answered]
    return []


def close_batch(
    messages: Sequence[ChatMessage], outcome_for: Callable[[ToolCall], CallOutcome]
) -> list[ChatMessage]:
    """The `tool` messages that answer every unanswered call of the latest batch, in the
    model's order, each saying (via `render_outcome`) why the call did not run."""
    return [
        ChatMessage.tool(render_outcome(outcome_for(call)), call.id)
        for call in pending_tool_calls(messages)
    ]


def undecided_calls(gated: Iterable[str], decided: Iterable[str]) -> list[str]:
    """The gated call ids without a decision, in order; a batch resumes only when this is
    empty. An empty `gated` is no paused batch: callers check that separately."""
    done = set(decided)
    return [call_id for call_id in gated if call_id not in done]
