"""One model turn, the seam between the tool loop and a model provider: `ChatClient` streams
it, `TurnCollector` reads it (text, calls with ids unique in the session, the `Finish`), and
`within` bounds it with a deadline that keep-alive comments cannot extend."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from .exceptions import StreamError
from .messages import (
    AgentResponseUpdate,
    ChatMessage,
    ChatUpdate,
    Finish,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallStarted,
)
from .tools import Tool

__all__ = [
    "ChatClient",
    "ChatOptions",
    "TurnCollector",
    "TurnDeadline",
    "closing",
    "within",
]


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """Per-request knobs passed through to the provider."""

    temperature: float | None = None
    max_tokens: int | None = None
    parallel_tool_calls: bool | None = None


class ChatClient(Protocol):
    """Streams one model turn.

    Yields text/reasoning deltas and tool-call events, then exactly one `Finish` whose reason is
    `STOP`, `LENGTH`, `CONTENT_FILTER` or `TOOL_CALLS` (with every call already reported by a
    `ToolCallEnded`). Failures are raised as `ChatClientError`, never yielded.
    """

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool] = (),
        options: ChatOptions | None = None,
    ) -> AsyncIterator[ChatUpdate]: ...


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


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


# A model turn with a deadline: a stream kept alive by SSE comments still ends.
#
# A provider (or a proxy) may send keep-alive comments for ever; they reset every read timeout
# and yield no update, so only a deadline on the whole turn bounds it. The stream runs in its
# own task feeding a one-slot queue: the wait for the next update is bounded, never the
# consumer's handling of an update, and the stream is opened and closed in one task.

_T = TypeVar("_T")


class TurnDeadline(StreamError):
    """The model did not finish its turn within the run's `turn_timeout`."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the model did not finish its turn within {seconds:g} s")
        self.seconds = seconds


class _End:
    """The stream ended normally."""


class _Raised:
    """The stream raised `exc`: the consumer raises it."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


async def within(stream: AsyncIterator[_T], seconds: float | None) -> AsyncGenerator[_T, None]:
    """Yield `stream`'s items; raise `TurnDeadline` once `seconds` have passed since the first
    wait (None: no deadline, the stream as it is)."""
    if seconds is None:
        try:
            async for item in stream:
                yield item
        finally:
            await _aclose(stream)
        return
    queue: asyncio.Queue[tuple[_T] | _End | _Raised] = asyncio.Queue(maxsize=1)

    async def pump() -> None:
        try:
            async for item in stream:
                await queue.put((item,))
            await queue.put(_End())
        except Exception as exc:
            await queue.put(_Raised(exc))
        finally:
            await _aclose(stream)

    task = asyncio.create_task(pump(), name="model turn")
    deadline = asyncio.get_running_loop().time() + seconds
    try:
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    got = await queue.get()
            except TimeoutError:
                raise TurnDeadline(seconds) from None
            match got:
                case _End():
                    return
                case _Raised(exc=exc):
                    raise exc
                case (item,):
                    yield item
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _aclose(stream: AsyncIterator[object]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


@contextlib.asynccontextmanager
async def closing(stream: AsyncIterator[_T]) -> AsyncGenerator[AsyncIterator[_T], None]:
    """Close a model stream however the loop leaves it, so its connection is released now."""
    try:
        yield stream
    finally:
        await _aclose(stream)
