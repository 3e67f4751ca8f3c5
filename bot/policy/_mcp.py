"""The policy's side of MCP tools: their gate, the `NAME__*` entries of channel tool lists, and
the checks that keep `[tools.X]` and `[mcp_servers.NAME]` from saying different things.

The gate asks the tool itself (`McpTool.decide`): its `[mcp_servers.NAME.tools.TOOL]` override,
the server's `approval` and the server's annotations are all the tool's own configuration.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from agent_core import Tool, ToolCall
from bot.argument_rule import schema_defaults
from bot.tools.mcp.config import McpServerConfig
from bot.tools.mcp.pins import QUARANTINED
from bot.tools.mcp.tool import SEPARATOR, McpTool, qualified_name

from ._gate import GateDecision
from ._preview import tool_preview

__all__ = [
    "mcp_decision",
    "misplaced_mcp_sections",
    "offered_tools",
    "server_of",
    "unknown_wildcards",
]

WILDCARD = SEPARATOR + "*"


def mcp_decision(tool: McpTool, call: ToolCall) -> GateDecision:
    """Whether a call of an MCP tool waits, and the rule that said so. Arguments that are not a
    JSON object cannot be matched against anything, so a human looks at them."""
    try:
        arguments = call.parsed_arguments()
    except ValueError:
        return GateDecision(
            True, f"mcp_servers.{tool.server}: arguments unreadable, approval required"
        )
    decided = tool.decide(arguments)
    if tool.quarantined:
        return GateDecision(True, decided.rule, justification=QUARANTINED)
    override = tool.override
    if not decided.required or override is None or override.preview is None:
        return GateDecision(decided.required, decided.rule)
    plan = tool_preview(
        qualified_name(tool.server, override.preview),
        override.preview_args or {},
        arguments,
        schema_defaults(tool.parameters),
        override.preview_ttl,
    )
    return GateDecision(True, decided.rule, preview=plan)


def server_of(entry: str) -> str | None:
    """The server an entry `NAME__TOOL` or `NAME__*` names, or None for a plain tool name."""
    server, separator, rest = entry.partition(SEPARATOR)
    return server if separator and server and rest else None


def offered_tools(entries: Iterable[str], tools: Mapping[str, Tool]) -> tuple[Tool, ...]:
    """A channel's `tools` list as tools, in its order, each once: `NAME__*` stands for every
    tool of MCP server NAME; a name the bot lacks is left out (`check_tools` reports it)."""
    chosen: dict[str, Tool] = {}
    for entry in entries:
        if entry.endswith(WILDCARD):
            server = entry[: -len(WILDCARD)]
            for tool in tools.values():
                if isinstance(tool, McpTool) and tool.server == server:
                    chosen.setdefault(tool.name, tool)
        elif entry in tools:
            chosen.setdefault(entry, tools[entry])
    return tuple(chosen.values())


def unknown_wildcards(
    channels: Mapping[str, Collection[str] | None], servers: Collection[str]
) -> str | None:
    """The first `NAME__*` entry naming no `[mcp_servers.NAME]`, as a problem, or None."""
    for channel, entries in channels.items():
        for entry in entries or ():
            if entry.endswith(WILDCARD) and entry[: -len(WILDCARD)] not in servers:
                return (
                    f"channels_policy.{channel}.tools: {entry!r} names MCP server "
                    f"{entry[: -len(WILDCARD)]!r}, but there is no such [mcp_servers] section; "
                    f"configured: {', '.join(sorted(servers)) or 'none'}"
                )
    return None


def misplaced_mcp_sections(
    tools: Collection[str], servers: Mapping[str, McpServerConfig]
) -> str | None:
    """A `[tools.NAME__TOOL]` for a configured MCP server, as a problem, or None: such a tool
    is configured under its server, where its approval is decided."""
    for name in tools:
        server = server_of(name)
        if server is not None and server in servers:
            tool = name[len(server) + len(SEPARATOR) :]
            return (
                f"[tools.{name}] is an MCP server's tool: configure it as "
                f"[mcp_servers.{server}.tools.{tool}]"
            )
    return None
