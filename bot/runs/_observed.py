"""The agent's chat client, wrapped so that the run service's observer hears of every failed
model request with its typed cause (the loop keeps only the message). Tool executions need no
wrapper: `agent_core` reports each one's duration on its `ToolResult`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from agent_core import Tool
from agent_core.chat_client import ChatClient, ChatOptions
from agent_core.events import ChatUpdate
from agent_core.exceptions import ChatClientError
from agent_core.messages import ChatMessage

from ..observability import classify_llm_error
from .observer import RunObserver

__all__ = ["ObservedChatClient"]


class ObservedChatClient:
    """A `ChatClient` that reports each failed model request by kind before re-raising it."""

    def __init__(self, client: ChatClient, observer: RunObserver) -> None:
        self.client = client
        self.observer = observer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)  # `check()`, `model`, …

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool] = (),
        options: ChatOptions | None = None,
    ) -> AsyncIterator[ChatUpdate]:
        updates = self.client.stream(messages, tools=tools, options=options)
        try:
            async for update in updates:
                yield update
        except ChatClientError as exc:
            self.observer.llm_error(classify_llm_error(exc))
            raise
        finally:
            if (aclose := getattr(updates, "aclose", None)) is not None:
                await aclose()
