"""Collecting one model turn for the tool loop: its text, its finished calls and its `Finish`."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import TypeVar

from .events import (
    AgentResponseUpdate,
    ChatUpdate,
    Finish,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallStarted,
)
from .messages import ChatMessage, ToolCall

__all__ = ["TurnCollector", "closing", "new_call_id"]

_T = TypeVar("_T")


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@contextlib.asynccontextmanager
async def closing(stream: AsyncIterator[_T]) -> AsyncGenerator[AsyncIterator[_T], None]:
    """Close a model stream however the loop leaves it, so its connection is released now."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


class TurnCollector:
    """Collects one model turn: its text, its finished calls and its `Finish`.

    Call ids must be unique within the session: the tool-call ledger is keyed by them, and a
    provider matches each `tool` message to its call by id. Some providers send an empty id, or
    reuse ids across turns (`call_0` every time); such an id is replaced by a fresh one in every
    event of the call, before anything is stored.
    """

    def __init__(self, history: Sequence[ChatMessage]) -> None:
        self.used = {call.id for message in history for call in message.tool_calls}
        self.renamed: dict[str, str] = {}
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.finish: Finish | None = None
        self.error: str | None = None
        """Why the model request failed, if it did (set by the loop)."""

    @property
    def started(self) -> bool:
        """Whether the model sent anything yet (a retry would repeat it)."""
        return bool(self.text or self.calls or self.renamed)

    @property
    def content(self) -> str | None:
        return "".join(self.text) or None

    def _id(self, raw: str) -> str:
        new = self.renamed.get(raw)
        if new is None:
            new = raw if raw and raw not in self.used else new_call_id()
            self.renamed[raw] = new
            self.used.add(new)
        return new

    def take(self, update: ChatUpdate) -> AgentResponseUpdate | None:
        """Record one update; return what the consumer should see (`None` for the `Finish`)."""
        match update:
            case Finish():
                self.finish = update
                return None
            case TextDelta(text=delta):
                self.text.append(delta)
            case ToolCallStarted(call_id=raw, name=name):
                if (new := self._id(raw)) != raw:
                    return ToolCallStarted(new, name)
            case ToolCallArgumentsDelta(call_id=raw, delta=delta):
                if (new := self._id(raw)) != raw:
                    return ToolCallArgumentsDelta(new, delta)
            case ToolCallEnded(call=call):
                new = self._id(call.id)
                if any(c.id == new for c in self.calls):  # two calls of one turn share an id
                    new = new_call_id()
                    self.used.add(new)
                if new != call.id:
                    call = call.model_copy(update={"id": new})
                    update = ToolCallEnded(call)
                self.calls.append(call)
        return update
