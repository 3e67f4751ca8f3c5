"""Built-in chat-ops tools (`run_command`, `http_request`) and loading teams' own tools."""

from ..errors import RunAsError, ShellMissing, ToolEnvironmentError, ToolLoadError
from ._loader import (
    BUILT_IN_SUMMARIES,
    TEMPLATE_WARNING,
    default_tools,
    load_tool,
    load_tools,
    tool_summary,
)
from .command import (
    BASE_NAMES,
    BASE_PREFIXES,
    BASH,
    DEFAULT_OUTPUT_LIMIT,
    DEFAULT_TIMEOUT,
    RunAs,
    base_environment,
    checked_shell,
    make_run_command,
    privilege_warnings,
    protect_process_environment,
    resolve_run_as,
    tool_environment,
)
from .http import SAFE_METHODS, http_gate, make_http_request

__all__ = [  # noqa: RUF022 -- plain sorted() order, as every package here
    "BASE_NAMES",
    "BASE_PREFIXES",
    "BASH",
    "BUILT_IN_SUMMARIES",
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_TIMEOUT",
    "RunAs",
    "RunAsError",
    "SAFE_METHODS",
    "ShellMissing",
    "TEMPLATE_WARNING",
    "ToolEnvironmentError",
    "ToolLoadError",
    "base_environment",
    "checked_shell",
    "default_tools",
    "http_gate",
    "load_tool",
    "load_tools",
    "make_http_request",
    "make_run_command",
    "privilege_warnings",
    "protect_process_environment",
    "resolve_run_as",
    "tool_environment",
    "tool_summary",
]
