"""What a run streams to its consumer: a discriminated union of frozen dataclasses.

Consumers `match` on the classes (or on `kind`). The chat client produces the first few kinds;
the tool loop adds tool results, approval requests, the start of each tool's run and the final
`Finish`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

from .messages import ToolCall
from .outcomes import CallOutcome

__all__ = [
    "AgentResponseUpdate",
    "ChatUpdate",
    "Finish",
    "FinishReason",
    "ReasoningDelta",
    "TextDelta",
    "ToolApprovalRequest",
    "ToolCallArgumentsDelta",
    "ToolCallEnded",
    "ToolCallHeld",
    "ToolCallStarted",
    "ToolResult",
    "ToolRunning",
    "Usage",
]


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    TOOL_CALLS = "tool_calls"
    """Internal: the model wants tools run. The loop consumes it; consumers never see it."""
    AWAITING_APPROVAL = "awaiting_approval"
    MAX_ROUNDS = "max_rounds"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
        )


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Model 'thinking'. Kept apart from the text so it never reaches the user by accident."""

    text: str
    kind: Literal["reasoning_delta"] = "reasoning_delta"


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    call_id: str
    name: str
    kind: Literal["tool_call_started"] = "tool_call_started"


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    call_id: str
    delta: str
    kind: Literal["tool_call_arguments_delta"] = "tool_call_arguments_delta"


@dataclass(frozen=True, slots=True)
class ToolCallEnded:
    """The call is complete: its id, name and whole argument text are final."""

    call: ToolCall
    kind: Literal["tool_call_ended"] = "tool_call_ended"


@dataclass(frozen=True, slots=True)
class ToolRunning:
    """The call's tool starts running now (it is claimed: marked started in the journal).
    Not `ToolCallStarted`, which is the model starting to write a call."""

    call_id: str
    name: str
    kind: Literal["tool_running"] = "tool_running"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The answer to one call, as the model reads it in the call's `tool` message.

    `outcome` is set when the call did not run because of a decision or its absence (rejected,
    expired, cancelled): consumers `match` on it rather than reading `content`. It is `None`
    for a call that ran, and for one answered with an error (unknown tool, bad arguments).
    """

    call_id: str
    name: str
    content: str
    is_error: bool = False
    outcome: CallOutcome | None = None
    seconds: float | None = field(default=None, compare=False)
    """How long the tool ran (monotonic clock; not part of equality); None if it did not run."""
    timed_out: bool = False
    """The tool ran past its time limit and was stopped (it raised `ToolTimeout`); `is_error`
    is set too."""
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class ToolApprovalRequest:
    """A call in the paused batch that a human must decide on."""

    call_id: str
    name: str
    arguments: Any
    description: str
    digest: str
    kind: Literal["tool_approval_request"] = "tool_approval_request"


@dataclass(frozen=True, slots=True)
class ToolCallHeld:
    """A call in the paused batch that needs no approval: it runs once the batch is decided."""

    call_id: str
    name: str
    arguments: Any
    kind: Literal["tool_call_held"] = "tool_call_held"


@dataclass(frozen=True, slots=True)
class Finish:
    finish_reason: FinishReason
    usage: Usage | None = None
    error: str | None = field(default=None)
    kind: Literal["finish"] = "finish"


ChatUpdate = (
    TextDelta | ReasoningDelta | ToolCallStarted | ToolCallArgumentsDelta | ToolCallEnded | Finish
)
"""What a `ChatClient` streams for one model turn."""

AgentResponseUpdate = (
    TextDelta
    | ReasoningDelta
    | ToolCallStarted
    | ToolCallArgumentsDelta
    | ToolCallEnded
    | ToolRunning
    | ToolResult
    | ToolApprovalRequest
    | ToolCallHeld
    | Finish
)
"""What a run streams to its caller."""
