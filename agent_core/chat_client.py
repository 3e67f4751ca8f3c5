"""The seam between the tool loop and a model provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from .events import ChatUpdate
from .messages import ChatMessage
from .tools import Tool

__all__ = ["ChatClient", "ChatOptions"]


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
