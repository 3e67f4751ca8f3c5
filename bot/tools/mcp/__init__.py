"""MCP tool servers from the policy file's `[mcp_servers.NAME]` (`bot.policy`, which also gates
each call), offered as `NAME__TOOL` tools and kept connected here."""

from bot.errors import McpConfigError, McpServerError, McpStartError

from ._connection import INHERITED, McpObserver, NoMcpObserver, expand_variables, server_environment
from .servers import McpServers, Relisted, ServerCheck, check_servers, start_mcp_servers
from .tool import McpAnnotations, McpTool

__all__ = [
    "INHERITED",
    "McpAnnotations",
    "McpConfigError",
    "McpObserver",
    "McpServerError",
    "McpServers",
    "McpStartError",
    "McpTool",
    "NoMcpObserver",
    "Relisted",
    "ServerCheck",
    "check_servers",
    "expand_variables",
    "server_environment",
    "start_mcp_servers",
]
