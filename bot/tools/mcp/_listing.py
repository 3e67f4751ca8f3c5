"""A server's tool list while it runs: listing it, and hearing that it changed.

A server may change its tools without restarting. It says so with
`notifications/tools/list_changed` on the handshake protocols, or with the tools event on a
`subscriptions/listen` stream on 2026-07-28, which the client must open. `ListChanges` hears
both and sets one event; the connection then lists again and hands the new listing on, so the
same pin check as at start-up runs on it (a changed definition is quarantined at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import ListenNotSupportedError

__all__ = ["ListChanges", "list_tools"]

logger = logging.getLogger("bot.tools.mcp")

_PAGE_CAP = 100


async def list_tools(client: Client) -> list[types.Tool]:
    """Every tool the server lists, following its pages (at most `_PAGE_CAP`)."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_PAGE_CAP):
        page = await client.session.list_tools(
            params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


class ListChanges:
    """Hears that one server's tool list changed; `changed` is set until it is listed again."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.changed = asyncio.Event()

    async def message_handler(self, message: IncomingMessage) -> None:
        """The SDK client's `message_handler`: the notification of the handshake protocols."""
        if isinstance(message, types.ToolListChangedNotification):
            self.changed.set()

    async def listen(self, client: Client) -> None:
        """Hold a `subscriptions/listen` stream for tool changes while connected (2026-07-28;
        on older protocols the notification above is enough). Ends quietly when the server
        does not offer it or the stream drops: a restart lists the tools again anyway."""
        try:
            async with client.listen(tools_list_changed=True) as stream:
                if not stream.honored.tools_list_changed:
                    return
                async for _ in stream:
                    self.changed.set()
        except ListenNotSupportedError:
            return
        except Exception as exc:  # the connection's own supervision notices a dead server
            logger.info("MCP server %r: no longer hearing of tool changes: %s", self.server, exc)

    async def relist(self, client: Client) -> list[types.Tool]:
        """Wait for a change, then list the tools again."""
        await self.changed.wait()
        self.changed.clear()
        return await list_tools(client)

    @staticmethod
    async def stop(task: asyncio.Task[None] | None) -> None:
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
