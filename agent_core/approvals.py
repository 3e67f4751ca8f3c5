"""The caller's answer to a `ToolApprovalRequest`, the run options that carry it, and the
paused batch those answers decide (closed whole, resumed only when every gated call is decided)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .chat_client import ChatOptions
from .messages import CallOutcome, ChatMessage, Expired, Rejected, ToolCall, render_outcome
from .tools import Tool

ApprovalGate = Callable[[Tool, ToolCall], bool | Awaitable[bool]]
"""Decides whether one call of a known tool must wait for a human (it may be a coroutine
function, e.g. to look something up in a store)."""

__all__ = [
    "AgentRunOptions",
    "ApprovalGate",
    "Decision",
    "ToolApprovalResponse",
    "close_batch",
    "pending_tool_calls",
    "undecided_calls",
]

Decision = Literal["approved", "rejected", "expired", "closed"]
"""`closed`: the call does not run for a reason other than a decision on it (the run was
cancelled, the process restarted); `closed_with` says which."""


@dataclass(frozen=True, slots=True)
class ToolApprovalResponse:
    """A decision on one paused call. It names the call only: what runs is the stored call.

    Anything but an approval answers the call with its `outcome`, whose text `render_outcome`
    makes; this class holds no wording of its own.
    """

    call_id: str
    decision: Decision
    reason: str | None = None
    decided_by: str | None = None
    ttl: str | None = None
    """For `expired`: the time limit that ran out, in words (e.g. "15m")."""
    closed_with: CallOutcome | None = None
    """For `closed`: why the call does not run. Build it with `closed`."""
    edited_arguments: dict[str, Any] | None = None
    """For `approved`: the arguments a human changed the call to (`decided_by` edited it). The
    call runs with these; the model's own stay in the history, and the tool message says so."""

    def __post_init__(self) -> None:
        if self.edited_arguments is not None and self.decision != "approved":
            raise ValueError(
                f"response for call {self.call_id!r}: only an approval carries edited arguments"
            )
        if (self.decision == "closed") != (self.closed_with is not None):
            raise ValueError(
                f"response for call {self.call_id!r}: closed_with is set exactly when "
                f"the decision is 'closed', not {self.decision!r}"
            )

    @property
    def approved(self) -> bool:
        return self.decision == "approved"

    @property
    def outcome(self) -> CallOutcome | None:
        """Why the call does not run, as a typed value; `None` when it was approved."""
        match self.decision:
            case "approved":
                return None
            case "rejected":
                return Rejected(self.reason, self.decided_by)
            case "expired":
                return Expired(self.ttl) if self.ttl else Expired()
            case "closed":
                return self.closed_with
        raise AssertionError(f"unknown decision {self.decision!r} for call {self.call_id!r}")

    @classmethod
    def approve(
        cls,
        call_id: str,
        *,
        decided_by: str | None = None,
        edited_arguments: dict[str, Any] | None = None,
    ) -> ToolApprovalResponse:
        return cls(call_id, "approved", decided_by=decided_by, edited_arguments=edited_arguments)

    @classmethod
    def reject(
        cls, call_id: str, reason: str | None = None, *, decided_by: str | None = None
    ) -> ToolApprovalResponse:
        return cls(call_id, "rejected", reason=reason, decided_by=decided_by)

    @classmethod
    def expire(cls, call_id: str, ttl: str) -> ToolApprovalResponse:
        return cls(call_id, "expired", ttl=ttl)

    @classmethod
    def closed(cls, call_id: str, outcome: CallOutcome) -> ToolApprovalResponse:
        """A response from any outcome: a `Rejected` or `Expired` becomes that decision (so
        `reject`/`expire` and this agree), anything else (cancelled, not run, interrupted) a
        `closed` one."""
        match outcome:
            case Rejected(reason=reason, by=by):
                return cls.reject(call_id, reason, decided_by=by)
            case Expired(ttl=ttl):
                return cls.expire(call_id, ttl)
            case _:
                return cls(call_id, "closed", closed_with=outcome)

    def tool_message_text(self) -> str:
        """What the model is told about a call that did not run (see `render_outcome`)."""
        outcome = self.outcome
        if outcome is None:
            raise ValueError(f"call {self.call_id!r} was approved: its tool message is its result")
        return render_outcome(outcome)


@dataclass(frozen=True, slots=True)
class AgentRunOptions:
    """Options of one `ChatClientAgent.run`. Immutable: the `with_*` methods return copies."""

    tool_approval_responses: tuple[ToolApprovalResponse, ...] = ()
    max_rounds: int | None = None
    chat: ChatOptions = field(default_factory=ChatOptions)
    tools: tuple[Tool, ...] | None = None
    """Overrides the agent's tools for this run (e.g. a per-channel tool set)."""
    approval_gate: ApprovalGate | None = None
    """Overrides the agent's approval gate for this run (e.g. one that knows the channel)."""
    turn_timeout: float | None = None
    """Seconds one model turn may take, keep-alive comments or not; past it the run finishes
    with an error (None: no deadline)."""

    def with_tool_approval_responses(
        self, responses: Iterable[ToolApprovalResponse]
    ) -> AgentRunOptions:
        return dataclasses.replace(self, tool_approval_responses=tuple(responses))


# A batch is the tool calls of one assistant message. Providers answer HTTP 400 unless every
# `tool_call_id` of it has exactly one `tool` message, so every path that ends a batch without
# running it (resume, cancel, recovery after a crash) closes it here, and "is it decided?" is
# asked here only.


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
