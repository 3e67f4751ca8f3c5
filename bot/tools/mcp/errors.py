"""The MCP package's exception tree: every error it raises on purpose is an `McpServerError`."""

from __future__ import annotations

from bot.errors import BotError

__all__ = ["McpConfigError", "McpServerError", "McpStartError"]


class McpServerError(BotError):
    """Base of the errors about MCP tool servers. Messages name the server (and tool)."""


class McpConfigError(McpServerError):
    """The `[mcp_servers]` settings cannot be used: a missing `${VAR}`, an invalid tool name."""


class McpStartError(McpServerError):
    """A server did not start: missing command, failed handshake, unreachable URL, timeout."""
