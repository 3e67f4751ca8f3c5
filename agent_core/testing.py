"""Chat clients for tests of code built on agent_core: no network, no provider, the turns the
test says.

`FunctionChatClient(fn)` asks `fn(messages, request)` for every model turn, like pydantic-ai's
`FunctionModel`; `ScriptedChatClient(*turns)` plays a list back. Both stream a turn the way a
provider client does (text deltas, tool-call started / arguments / ended, one `Finish`) and
record every request, so a test can assert what the model saw. `history_problems` says why a
provider would refuse a history. Nothing here is imported by `agent_core` itself.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .chat_client import ChatOptions
from .messages import (
    ChatMessage,
    ChatUpdate,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallStarted,
    Usage,
)
from .tools import Tool

__all__ = [
    "FunctionChatClient",
    "Request",
    "ScriptExhausted",
    "ScriptedChatClient",
    "Turn",
    "TurnFunction",
    "call",
    "collect",
    "history_problems",
]


def call(call_id: str, name: str, /, **arguments: Any) -> ToolCall:
    """A tool call whose arguments are the keyword arguments, as JSON."""
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


@dataclass(frozen=True)
class Turn:
    """One model turn.

    `text` is streamed as the given deltas (a string is one delta). `error`, if set, is raised
    after the text and tool calls were streamed (a mid-stream failure). `finish_reason` defaults
    to `TOOL_CALLS` when there are calls and `STOP` otherwise; `finish=False` ends the stream
    without any `Finish` (a truncated stream).
    """

    text: str | Sequence[str] = ""
    tool_calls: Sequence[ToolCall] = ()
    usage: Usage | None = None
    finish_reason: FinishReason | None = None
    reasoning: str = ""
    error: BaseException | None = None
    finish: bool = True

    def updates(self) -> list[ChatUpdate]:
        """What a provider client streams for this turn, up to (not including) the `Finish`."""
        out: list[ChatUpdate] = []
        if self.reasoning:
            out.append(ReasoningDelta(self.reasoning))
        deltas = [self.text] if isinstance(self.text, str) else list(self.text)
        out.extend(TextDelta(delta) for delta in deltas if delta)
        for tool_call in self.tool_calls:
            out.append(ToolCallStarted(tool_call.id, tool_call.name))
            half = len(tool_call.arguments) // 2
            for piece in (tool_call.arguments[:half], tool_call.arguments[half:]):
                if piece:
                    out.append(ToolCallArgumentsDelta(tool_call.id, piece))
            out.append(ToolCallEnded(tool_call))
        return out

    def final(self) -> Finish | None:
        """The turn's `Finish`, or `None` for a truncated stream."""
        if not self.finish:
            return None
        reason = self.finish_reason or (
            FinishReason.TOOL_CALLS if self.tool_calls else FinishReason.STOP
        )
        return Finish(reason, self.usage)


@dataclass(frozen=True)
class Request:
    """What one `stream` call received."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[Tool, ...]
    options: ChatOptions | None

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]


TurnFunction = Callable[[Sequence[ChatMessage], Request], "Turn | str | Awaitable[Turn | str]"]
"""Makes the model's turn from the messages it is sent (and the whole request: tools, options).
A string is a text-only turn; an exception it raises fails the request before anything streams.
"""


class FunctionChatClient:
    """A `ChatClient` whose every turn is what `fn(messages, request)` returns (sync or async)."""

    def __init__(self, fn: TurnFunction) -> None:
        self.fn = fn
        self.requests: list[Request] = []
        self.streams_closed = 0
        """How many streams were finalised, whether finished, failed or abandoned."""

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool] = (),
        options: ChatOptions | None = None,
    ) -> AsyncGenerator[ChatUpdate, None]:
        request = Request(tuple(messages), tuple(tools), options)
        self.requests.append(request)
        try:
            made = self.fn(request.messages, request)
            turn = await made if inspect.isawaitable(made) else made
            if isinstance(turn, str):
                turn = Turn(text=turn)
            for update in turn.updates():
                yield update
            if turn.error is not None:
                raise turn.error
            if (finish := turn.final()) is not None:
                yield finish
        finally:
            self.streams_closed += 1


class ScriptExhausted(AssertionError):
    """The loop asked the model for more turns than the test scripted."""


class ScriptedChatClient(FunctionChatClient):
    """A `ChatClient` that plays back scripted turns in order; a scripted exception is raised
    in place of its turn (a request that fails before anything streams)."""

    def __init__(self, *turns: Turn | BaseException) -> None:
        super().__init__(self._next)
        self.script: list[Turn | BaseException] = list(turns)

    def add(self, *turns: Turn | BaseException) -> None:
        self.script.extend(turns)

    @property
    def remaining(self) -> int:
        return len(self.script)

    def _next(self, messages: Sequence[ChatMessage], request: Request) -> Turn:
        if not self.script:
            raise ScriptExhausted(f"model request #{len(self.requests)} was not scripted")
        turn = self.script.pop(0)
        if isinstance(turn, BaseException):
            raise turn
        return turn


async def collect(stream: AsyncIterable[Any]) -> list[Any]:
    """Every update of a run, in order."""
    return [update async for update in stream]


def history_problems(messages: Sequence[ChatMessage]) -> list[str]:
    """Why an OpenAI-compatible provider would reject this history (empty if it would not).

    Every assistant `tool_calls` message must be followed at once by one `tool` message per call,
    in the calls' order; a `tool` message must answer such a call; call ids must be unique.
    """
    problems: list[str] = []
    seen_ids: set[str] = set()
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.role == "tool":
            problems.append(f"tool message for {message.tool_call_id!r} answers no call")
            continue
        if message.role != "assistant" or not message.tool_calls:
            continue
        ids = [c.id for c in message.tool_calls]
        for call_id in ids:
            if not call_id:
                problems.append("a tool call has an empty id")
            if call_id in seen_ids:
                problems.append(f"tool call id {call_id!r} is used twice")
            seen_ids.add(call_id)
        answers: list[str | None] = []
        while index < len(messages) and messages[index].role == "tool":
            answers.append(messages[index].tool_call_id)
            index += 1
        if answers != ids:
            problems.append(f"calls {ids!r} are answered by tool messages {answers!r}")
    return problems
