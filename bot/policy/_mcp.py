"""The policy's side of MCP tools: `[mcp_servers.NAME]` (how to reach one MCP server and when
its calls wait), the gate of each call, the `NAME__*` entries of channel tool lists, and the
checks that keep `[tools.X]` and `[mcp_servers.NAME]` from saying different things.

Validated strictly (`extra="forbid"`), like the rest of the policy: a typo in a safety setting
must stop the bot at start-up rather than quietly fall back to a default. A call waits by the
tool's `[mcp_servers.NAME.tools.TOOL]` override, else the server's `approval`; "annotations"
trusts only `readOnlyHint: true`. Annotations are hints from the server, so nothing but that one
hint ever skips a human. The policy reads a server's tool through `McpGated` (which
`bot.tools.mcp.McpTool` is), so it needs nothing of the package that connects to servers.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal, Protocol, TypeGuard

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from agent_core import Tool, ToolCall
from bot.words import parse_duration

from ._fields import ArgumentRule, PreviewArgs, check_tool_preview, schema_defaults
from ._gate import GateDecision
from ._preview import tool_preview

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_START_TIMEOUT",
    "QUARANTINED",
    "SEPARATOR",
    "McpApproval",
    "McpApprovalMode",
    "McpGated",
    "McpServerConfig",
    "McpServerName",
    "McpToolOverride",
    "is_mcp",
    "mcp_approval",
    "mcp_approval_summary",
    "mcp_decision",
    "mcp_requires_approval",
    "misplaced_mcp_sections",
    "offered_tools",
    "qualified_name",
    "selects",
    "server_of",
    "unknown_wildcards",
]

DEFAULT_START_TIMEOUT = timedelta(seconds=30)
"""How long a server has to start and answer the handshake and `tools/list`."""
DEFAULT_CALL_TIMEOUT = timedelta(seconds=60)
"""How long one tool call may take before it is answered with an error."""
DEFAULT_OUTPUT_LIMIT = 20_000
"""Characters of a tool result kept (head and tail; the middle is cut)."""

McpApprovalMode = Literal["annotations", "always", "never"]
"""`annotations`: a tool annotated `readOnlyHint: true` runs freely, any other waits."""

_SERVER_NAME = re.compile(r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*")


def _server_name(value: str) -> str:
    if not _SERVER_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a usable MCP server name: use letters, digits, '-' and single "
            "'_' between them (tools are offered as NAME__TOOL, so '__' cannot be in NAME)"
        )
    return value


McpServerName = Annotated[StrictStr, AfterValidator(_server_name)]
"""A `[mcp_servers.NAME]` key; the policy model uses `dict[McpServerName, McpServerConfig]`."""


def _duration(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f'durations are written as text, like "30s" or "2m", not {value!r}')
    parsed = parse_duration(value)
    if parsed <= timedelta(0):
        raise ValueError(f"{value!r} is zero; a duration must be longer than that")
    return parsed


Duration = Annotated[timedelta, BeforeValidator(_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class McpToolOverride(_Model):
    """`[mcp_servers.NAME.tools.TOOL]`: one tool's approval instead of the server's.

    `approval = "rules"` asks only when one of `rules` matches, as for the built-in tools.
    `preview` names a read-only tool of the same server called before the card is posted
    (with `preview_args`, filled from the call's arguments), its output on the card and bound
    to Approve.
    """

    approval: McpApprovalMode | Literal["rules"] | None = None
    rules: tuple[ArgumentRule, ...] = ()
    preview: Annotated[StrictStr, Field(min_length=1)] | None = None
    preview_args: PreviewArgs | None = None
    preview_ttl: Duration | None = None

    @model_validator(mode="after")
    def _rules_fit_approval(self) -> McpToolOverride:
        if self.approval == "rules" and not self.rules:
            raise ValueError('approval = "rules" needs at least one [[...tools.TOOL.rules]] entry')
        if self.approval != "rules" and self.rules:
            raise ValueError(
                f'rules are only used with approval = "rules", but approval is {self.approval!r}'
            )
        if self.approval is None:
            raise ValueError(
                'say when this tool waits: approval = "annotations", "always", "never" or "rules"'
            )
        check_tool_preview(self.preview, self.preview_args, self.preview_ttl, self.approval)
        return self


class McpServerConfig(_Model):
    """`[mcp_servers.NAME]`: a stdio server (`command`, `args`, `env`) or a streamable-HTTP
    one (`url`, `headers`), and when its calls wait for a human.

    `${VAR}` in `headers` and `env` values is taken from the bot's environment when the server
    starts, so tokens stay out of the file; nothing else of that environment reaches a server.
    """

    command: Annotated[StrictStr, Field(min_length=1)] | None = None
    args: tuple[StrictStr, ...] = ()
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    url: Annotated[StrictStr, Field(pattern=r"^https?://")] | None = None
    headers: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    approval: McpApprovalMode = "annotations"
    pin: StrictBool = True
    """Pin each tool's definition at first sight and quarantine it when the server changes it
    (`bot.tools.mcp_tool`); false turns that off for this server (loudly, at start-up)."""
    timeout: Duration = DEFAULT_START_TIMEOUT
    """The longest the server may take to start and list its tools."""
    call_timeout: Duration = DEFAULT_CALL_TIMEOUT
    """The longest one tool call may take."""
    output_limit: Annotated[StrictInt, Field(gt=0)] = DEFAULT_OUTPUT_LIMIT
    """Characters kept of each tool result (head and tail)."""
    tools: dict[Annotated[StrictStr, Field(min_length=1)], McpToolOverride] = Field(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give either `command` (a stdio server) or `url` (a streamable-HTTP server), "
                "not both and not neither"
            )
        if self.command is None and (self.args or self.env):
            raise ValueError("`args` and `env` are for stdio servers (`command`), not `url`")
        if self.url is None and self.headers:
            raise ValueError("`headers` are for streamable-HTTP servers (`url`), not `command`")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


SEPARATOR = "__"
WILDCARD = SEPARATOR + "*"
QUARANTINED = "this tool changed since it was reviewed"
"""What the card of a quarantined tool's call says (its justification)."""


def qualified_name(server: str, tool: str) -> str:
    """The name the model sees: `NAME__TOOL`."""
    return f"{server}{SEPARATOR}{tool}"


def selects(entry: str, tool_name: str) -> bool:
    """Whether a channel's `tools` list entry names `tool_name`: "NAME__TOOL" exactly, or
    "NAME__*" for every tool of server NAME."""
    if entry.endswith(WILDCARD):
        return tool_name.startswith(entry[:-1]) and len(tool_name) > len(entry) - 1
    return entry == tool_name


class McpHints(Protocol):
    """The one annotation the gate trusts."""

    @property
    def read_only(self) -> bool | None: ...


class McpGated(Protocol):
    """An MCP server's tool as its gate reads it: where it comes from, its schema, its
    annotations, whether its definition changed since review, and its server's section."""

    @property
    def server(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def parameters(self) -> dict[str, Any]: ...
    @property
    def annotations(self) -> McpHints: ...
    @property
    def quarantined(self) -> bool: ...
    @property
    def server_config(self) -> McpServerConfig: ...


def is_mcp(tool: object) -> TypeGuard[McpGated]:
    """Whether `tool` is an MCP server's tool: it carries its server's section."""
    return isinstance(getattr(tool, "server_config", None), McpServerConfig)


@dataclass(frozen=True)
class McpApproval:
    """Whether one call waits for a human, and the rule that decided (for the audit log)."""

    kind: Literal["approval_required", "runs_freely"]
    rule: str

    @property
    def required(self) -> bool:
        return self.kind == "approval_required"


def _mode(tool: McpGated) -> str:
    override = tool.server_config.tools.get(tool.tool)
    if override is not None and override.approval is not None:
        return override.approval
    return tool.server_config.approval


def mcp_approval(tool: McpGated, arguments: Mapping[str, Any]) -> McpApproval:
    """Override first, then the server's mode; rules are matched like the built-ins'."""
    where = f"mcp_servers.{tool.server}"
    override = tool.server_config.tools.get(tool.tool)
    if override is not None:
        where = f"{where}.tools.{tool.tool}"
    if tool.quarantined:  # the strictest of its rule and `always`: always, whatever it says
        return McpApproval("approval_required", f"{where}: quarantined (definition changed)")
    mode = _mode(tool)
    if mode == "rules" and override is not None:
        defaults = schema_defaults(tool.parameters)
        for index, rule in enumerate(override.rules):
            if rule.matches(arguments, defaults):
                return McpApproval("approval_required", f"{where}.rules[{index}] ({rule.label})")
        return McpApproval("runs_freely", f"{where}: no rule matched")
    if mode == "always":
        return McpApproval("approval_required", f"{where}: approval = always")
    if mode == "never":
        return McpApproval("runs_freely", f"{where}: approval = never")
    if tool.annotations.read_only is True:
        return McpApproval("runs_freely", f"{where}: approval = annotations (readOnlyHint)")
    return McpApproval(
        "approval_required", f"{where}: approval = annotations (not annotated read-only)"
    )


def mcp_requires_approval(tool: McpGated) -> bool:
    """Without arguments: True unless no call of this tool can ever wait."""
    if tool.quarantined:
        return True
    mode = _mode(tool)
    if mode == "never":
        return False
    if mode == "annotations":
        return tool.annotations.read_only is not True
    return True


def mcp_approval_summary(tool: McpGated) -> str:
    """When calls wait, in a few words (for `/opsgate help`)."""
    if not mcp_requires_approval(tool):
        return "runs without approval"
    override = tool.server_config.tools.get(tool.tool)
    seen = f" (preview: {override.preview})" if override and override.preview else ""
    if _mode(tool) == "rules" and override is not None:
        return "asks for approval for " + "; ".join(r.label for r in override.rules) + seen
    return "asks for approval" + seen


def mcp_decision(tool: McpGated, call: ToolCall) -> GateDecision:
    """Whether a call of an MCP tool waits, and the rule that said so. Arguments that are not a
    JSON object cannot be matched against anything, so a human looks at them."""
    try:
        arguments = call.parsed_arguments()
    except ValueError:
        return GateDecision(
            True, f"mcp_servers.{tool.server}: arguments unreadable, approval required"
        )
    decided = mcp_approval(tool, arguments)
    if tool.quarantined:
        return GateDecision(True, decided.rule, justification=QUARANTINED)
    override = tool.server_config.tools.get(tool.tool)
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
                if _of_server(tool, server):
                    chosen.setdefault(tool.name, tool)
        elif entry in tools:
            chosen.setdefault(entry, tools[entry])
    return tuple(chosen.values())


def _of_server(tool: object, server: str) -> bool:
    return is_mcp(tool) and tool.server == server


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
