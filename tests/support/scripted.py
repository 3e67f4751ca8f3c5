"""A scripted, in-process `ChatClient` for unit tests of the tool loop, and history checks.

Each call to `ScriptedChatClient.stream` pops the next scripted `Turn` and streams it the way a
real provider client would (text deltas, tool-call started / arguments / ended, one `Finish`), or
raises the scripted exception. Every request is recorded, so a test can assert what the model saw.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent_core import (
    ChatMessage,
    ChatOptions,
    ChatUpdate,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallStarted,
    Usage,
)

__all__ = [
    "Request",
    "ScriptExhausted",
    "ScriptedChatClient",
    "Turn",
    "call",
    "collect",
    "history_problems",
]


def call(call_id: str, name: str, /, **arguments: Any) -> ToolCall:
    """A tool call whose arguments are the keyword arguments, as JSON."""
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


@dataclass(frozen=True)
class Turn:
    """One scripted model turn.

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


@dataclass(frozen=True)
class Request:
    """What one `stream` call received."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[Tool, ...]
    options: ChatOptions | None

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]


class ScriptExhausted(AssertionError):
    """The loop asked the model for more turns than the test scripted."""


class ScriptedChatClient:
    """A `ChatClient` that plays back scripted turns (or raises scripted exceptions)."""

    def __init__(self, *turns: Turn | BaseException) -> None:
        self.script: list[Turn | BaseException] = list(turns)
        self.requests: list[Request] = []
        self.streams_closed = 0
        """How many streams were finalised, whether finished, failed or abandoned."""

    def add(self, *turns: Turn | BaseException) -> None:
        self.script.extend(turns)

    @property
    def remaining(self) -> int:
        return len(self.script)

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool] = (),
        options: ChatOptions | None = None,
    ) -> AsyncGenerator[ChatUpdate, None]:
        self.requests.append(Request(tuple(messages), tuple(tools), options))
        if not self.script:
            raise ScriptExhausted(f"model request #{len(self.requests)} was not scripted")
        turn = self.script.pop(0)
        try:
            if isinstance(turn, BaseException):
                raise turn
            for update in turn.updates():
                yield update
            if turn.error is not None:
                raise turn.error
            if turn.finish:
                reason = turn.finish_reason or (
                    FinishReason.TOOL_CALLS if turn.tool_calls else FinishReason.STOP
                )
                yield Finish(reason, turn.usage)
        finally:
            self.streams_closed += 1


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
