"""Where a conversation lives between runs: the `SessionStore` protocol and an in-memory store.

The store is told about every step that must survive a crash, in the order it happens: messages
as they are produced, the paused batch, and each tool call's start and finish. A durable store
(see `bot.store`) commits each of these before the loop goes on, which is what makes a resume
after a restart safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .exceptions import ToolCallAlreadyStarted
from .messages import ChatMessage, ToolApprovalRequest, ToolCall, ToolCallHeld

__all__ = ["AgentSession", "InMemorySessionStore", "SessionStore", "StoredContext", "Summary"]


@dataclass(slots=True)
class AgentSession:
    """A conversation's identity. Its history lives in the store, not here."""

    id: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Summary:
    """What stands for the first `upto` messages of a history in requests to the model.

    Made by the model (`kind="summary"`) or, if that failed, a plain note of what was left out
    (`kind="note"`). Stored once; the messages it replaces stay stored, whole.
    """

    upto: int
    text: str
    kind: Literal["summary", "note"] = "summary"


@dataclass(frozen=True, slots=True)
class StoredContext:
    """What a run loads: the latest summary and the messages after it (from index `start`)."""

    summary: Summary | None
    messages: list[ChatMessage]

    @property
    def start(self) -> int:
        return 0 if self.summary is None else self.summary.upto


class SessionStore(Protocol):
    async def load_messages(self, session_id: str) -> list[ChatMessage]:
        """The whole history, oldest first."""
        ...

    async def load_context(self, session_id: str) -> StoredContext:
        """The latest summary and the messages after it: what a run needs, whatever the length
        of the thread before it."""
        ...

    async def save_summary(self, session_id: str, summary: Summary) -> bool:
        """Store a summary of the first `summary.upto` messages, if it reaches further than the
        latest one (False otherwise: another run compacted meanwhile)."""
        ...

    async def append_messages(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        """Append (never rewrite) messages to the history."""
        ...

    async def record_pause(
        self,
        session_id: str,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None:
        """Append the assistant message whose calls wait for decisions, with its pending calls."""
        ...

    async def start_tool_call(self, session_id: str, call: ToolCall) -> None:
        """Mark the call as executing before it runs.

        Raises `ToolCallAlreadyStarted` if it was started before: it must not run twice.
        """
        ...

    async def finish_tool_call(
        self, session_id: str, call: ToolCall, message: ChatMessage, *, is_error: bool
    ) -> None:
        """Record the call's result and append its tool message."""
        ...


class InMemorySessionStore:
    """A `SessionStore` for scripts and tests; everything is lost with the process."""

    def __init__(self) -> None:
        self.messages: dict[str, list[ChatMessage]] = {}
        self.call_status: dict[tuple[str, str], str] = {}
        self.pending: dict[str, list[ToolApprovalRequest]] = {}
        self.summaries: dict[str, list[Summary]] = {}

    async def load_messages(self, session_id: str) -> list[ChatMessage]:
        return list(self.messages.get(session_id, ()))

    async def load_context(self, session_id: str) -> StoredContext:
        summaries = self.summaries.get(session_id)
        summary = summaries[-1] if summaries else None
        start = 0 if summary is None else summary.upto
        return StoredContext(summary, list(self.messages.get(session_id, ())[start:]))

    async def save_summary(self, session_id: str, summary: Summary) -> bool:
        summaries = self.summaries.setdefault(session_id, [])
        if summaries and summaries[-1].upto >= summary.upto:
            return False
        summaries.append(summary)
        return True

    async def append_messages(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        self.messages.setdefault(session_id, []).extend(messages)

    async def record_pause(
        self,
        session_id: str,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None:
        await self.append_messages(session_id, [message])
        self.pending[session_id] = list(requests)
        for call in message.tool_calls:
            self.call_status[(session_id, call.id)] = "pending"

    async def start_tool_call(self, session_id: str, call: ToolCall) -> None:
        status = self.call_status.get((session_id, call.id))
        if status in ("executing", "done", "interrupted"):
            raise ToolCallAlreadyStarted(call.id, status)
        self.call_status[(session_id, call.id)] = "executing"

    async def finish_tool_call(
        self, session_id: str, call: ToolCall, message: ChatMessage, *, is_error: bool
    ) -> None:
        self.call_status[(session_id, call.id)] = "done"
        await self.append_messages(session_id, [message])
