"""What a card says about an MCP server's tool: the server, the tool and its annotations."""

from __future__ import annotations

from agent_core import Tool

from ..tools.mcp import McpTool
from .cards import ServerTool

__all__ = ["server_tool"]


def server_tool(tool: Tool | None) -> ServerTool | None:
    """The card's facts about `tool` when it is an MCP server's tool, else None."""
    if not isinstance(tool, McpTool):
        return None
    hints = tool.annotations
    return ServerTool(
        server=tool.server,
        tool=tool.tool,
        title=hints.title,
        labels=hints.labels(),
        destructive=hints.destructive is True and hints.read_only is not True,
    )
