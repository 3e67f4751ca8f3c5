"""What passes between the model, the tool loop and the caller, as typed values.

Chat messages as the OpenAI-compatible wire knows them, and their lossless JSON form; lone
surrogates cleaned where outside text enters them; the outcome of a call that did not run, which
becomes its `tool` message; and the updates a run streams (the event kinds). One vocabulary in
one module, as the model's messages and the stream's events name each other (`ToolCallEnded`
carries a `ToolCall`, `ToolResult` an outcome).
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AgentResponseUpdate",
    "CallOutcome",
    "Cancelled",
    "ChatMessage",
    "ChatUpdate",
    "Edited",
    "Expired",
    "Finish",
    "FinishReason",
    "Interrupted",
    "NotRun",
    "ReasoningDelta",
    "Rejected",
    "Role",
    "TextDelta",
    "ToolApprovalRequest",
    "ToolCall",
    "ToolCallArgumentsDelta",
    "ToolCallEnded",
    "ToolCallHeld",
    "ToolCallStarted",
    "ToolResult",
    "ToolRunning",
    "Usage",
    "call_digest",
    "canonical_arguments",
    "edited_result",
    "has_lone_surrogates",
    "render_outcome",
    "replace_lone_surrogates",
    "replace_lone_surrogates_in",
]

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One function call the model asked for. `arguments` is the raw JSON text the model sent.

    The raw text is kept (not a parsed dict) because it is what the provider expects back in the
    history, and because malformed arguments must survive to be reported, not silently dropped.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = ""
    gated: bool = False
    """Set by the tool loop on a call it held for a human decision. Stored with the history so a
    resume asks for exactly the decisions the cards asked for, even if the policy changed in
    between; never sent to the provider."""

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a JSON object; raises `ValueError` with a readable message if not."""
        text = self.arguments.strip() or "{}"
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments of {self.name!r} are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"arguments of {self.name!r} must be a JSON object")
        return replace_lone_surrogates_in(value)  # type: ignore[no-any-return]

    def display_arguments(self) -> Any:
        """What people are shown and what `call_digest` binds: the parsed object, or the raw text
        if it is not a JSON object (so a malformed call is still shown exactly as sent)."""
        try:
            return self.parsed_arguments()
        except ValueError:
            return self.arguments

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ChatMessage(BaseModel):
    """A message of the conversation. Immutable so history can be shared without copying."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = Field(default=())
    tool_call_id: str | None = None
    name: str | None = None

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str, *, name: str | None = None) -> ChatMessage:
        return cls(role="user", content=content, name=name)

    @classmethod
    def assistant(cls, content: str | None, tool_calls: tuple[ToolCall, ...] = ()) -> ChatMessage:
        return cls(role="assistant", content=content, tool_calls=tool_calls)

    @classmethod
    def tool(cls, content: str, tool_call_id: str) -> ChatMessage:
        return cls(role="tool", content=content, tool_call_id=tool_call_id)

    def to_wire(self) -> dict[str, Any]:
        """The dict an OpenAI-compatible `/chat/completions` request carries."""
        out: dict[str, Any] = {"role": self.role}
        if self.role == "assistant" and self.tool_calls:
            out["content"] = self.content or None
            out["tool_calls"] = [tc.to_wire() for tc in self.tool_calls]
        else:
            out["content"] = self.content or ""
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "user":
            out["name"] = self.name
        return out

    def to_json(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ChatMessage:
        return cls.model_validate_json(text)


def canonical_arguments(arguments: Any) -> str:
    """One spelling for equal arguments: sorted keys, no spaces, UTF-8 kept."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return replace_lone_surrogates(text)


def call_digest(name: str, arguments: Any) -> str:
    """A short fingerprint of what exactly will run, shown on the approval card.

    Binding the human's decision to a visible digest makes a swapped call noticeable.
    """
    payload = f"{name}\n{canonical_arguments(arguments)}".encode()
    return hashlib.sha256(payload).hexdigest()[:12]


# Lone surrogates: text Python can hold but UTF-8 cannot carry.
#
# A JSON `\ud800` escape without its partner decodes to a `str` holding U+D800; the first
# `.encode()` downstream (the database, the Slack request, the next model request) then raises, far
# from where the text came in. Text from outside (a model stream, tool arguments, tool output) is
# cleaned where it enters: each lone surrogate becomes U+FFFD, the replacement character, as a
# UTF-8 decoder would have done. A proper pair held as two code points is joined, not replaced.

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogates(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def replace_lone_surrogates(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (the same object if it has none)."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def replace_lone_surrogates_in(value: Any) -> Any:
    """A JSON-like value (dicts, lists, tuples) with every string, keys too, cleaned."""
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if isinstance(value, dict):
        return {
            replace_lone_surrogates_in(k): replace_lone_surrogates_in(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(replace_lone_surrogates_in(item) for item in value)
    return value


# Why a tool call did not run (or ran other than the model asked), as typed values.
#
# Every front end (Slack, the terminal, the store's recovery) says what happened to a call with
# one of these; `render_outcome` is the one place that turns it into the text the model reads in
# the call's `tool` message. Nobody parses that text back: consumers `match` on the value.


@dataclass(frozen=True, slots=True)
class Rejected:
    """A human said no. `by` is how the front end names that person to the model."""

    reason: str | None = None
    by: str | None = None
    kind: Literal["rejected"] = "rejected"


@dataclass(frozen=True, slots=True)
class Expired:
    """No decision came within the time limit (`ttl`, in words such as "15m")."""

    ttl: str = "the time limit"
    kind: Literal["expired"] = "expired"


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The whole run was cancelled while this gated call waited for a decision."""

    by: str | None = None
    kind: Literal["cancelled"] = "cancelled"


@dataclass(frozen=True, slots=True)
class NotRun:
    """A call that needed no decision (or was approved) but never ran: its run was cancelled
    (`cancelled_by` set) or the process restarted before it started."""

    cancelled_by: str | None = None
    kind: Literal["not_run"] = "not_run"


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The process stopped while the call was running: its outcome is unknown, and it is never
    run again (it may have had effects)."""

    kind: Literal["interrupted"] = "interrupted"


@dataclass(frozen=True, slots=True)
class Edited:
    """A human changed the arguments before approving: the call ran with `arguments`, not with
    the model's `original`. Rendered as a preface to the call's real result (`edited_result`)."""

    by: str | None
    original: dict[str, Any]
    arguments: dict[str, Any]
    kind: Literal["edited"] = "edited"


CallOutcome = Rejected | Expired | Cancelled | NotRun | Interrupted
"""What the model is told instead of a result: the call did not run."""


def render_outcome(outcome: CallOutcome | Edited) -> str:
    """The model-facing text of an outcome; the only place this wording lives."""
    match outcome:
        case Rejected(reason=reason, by=by):
            text = f"Rejected: {reason or 'User denied'}"
            return f"{text} (rejected by {by})" if by else text
        case Expired(ttl=ttl):
            return f"Expired: no decision within {ttl}; the call was not run"
        case Cancelled(by=by):
            return f"Rejected: cancelled by {by or 'a user'}"
        case NotRun(cancelled_by=None):
            return "Not run: OpsGate restarted before this call ran."
        case NotRun(cancelled_by=by):
            return f"Not run: the run was cancelled by {by}"
        case Interrupted():
            return (
                "Interrupted: OpsGate stopped while this call was running; "
                "its outcome is unknown and it was not run again."
            )
        case Edited(by=by, arguments=arguments):
            shown = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
            who = f" by {by}" if by else ""
            return f"The call was edited by a human{who} before approval; it ran with {shown}."


def edited_result(edit: Edited, result: str) -> str:
    """The tool message of an edited call: who changed it and the arguments that ran, then the
    result, so the model knows its own arguments did not run."""
    return f"{render_outcome(edit)}\nResult:\n{result}"


# What a run streams to its consumer: a discriminated union of frozen dataclasses.
#
# Consumers `match` on the classes (or on `kind`). The chat client produces the first few kinds;
# the tool loop adds tool results, approval requests, the start of each tool's run and the final
# `Finish`.


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
