"""MCP tool servers from the policy file's `[mcp_servers.NAME]`, offered as `NAME__TOOL` tools
and gated per call by the server's approval mode, the tool's override and its annotations."""

from ._environment import INHERITED, server_environment
from .config import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_OUTPUT_LIMIT,
    DEFAULT_START_TIMEOUT,
    McpApprovalMode,
    McpServerConfig,
    McpServerName,
    McpToolOverride,
    expand_variables,
)
from .errors import McpConfigError, McpServerError, McpStartError
from .observer import McpObserver, NoMcpObserver
from .servers import McpServers, Relisted, ServerCheck, check_servers, start_mcp_servers
from .tool import McpAnnotations, McpApproval, McpTool, qualified_name, selects

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_START_TIMEOUT",
    "INHERITED",
    "McpAnnotations",
    "McpApproval",
    "McpApprovalMode",
    "McpConfigError",
    "McpObserver",
    "McpServerConfig",
    "McpServerError",
    "McpServerName",
    "McpServers",
    "McpStartError",
    "McpTool",
    "McpToolOverride",
    "NoMcpObserver",
    "Relisted",
    "ServerCheck",
    "check_servers",
    "expand_variables",
    "qualified_name",
    "selects",
    "server_environment",
    "start_mcp_servers",
]
