"""One MCP server tool as an agent_core `Tool`, with what the approval card shows about it.

Approval is decided per call (`decide(arguments)`): the tool's `[mcp_servers.NAME.tools.TOOL]`
override wins over the server's `approval`; "annotations" trusts only `readOnlyHint: true`.
Annotations are hints from the server, so nothing but that one hint ever skips a human.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bot.argument_rule import schema_defaults

from .config import McpServerConfig, McpToolOverride

__all__ = ["McpAnnotations", "McpApproval", "McpTool", "qualified_name", "selects"]

SEPARATOR = "__"


def qualified_name(server: str, tool: str) -> str:
    """The name the model sees: `NAME__TOOL`."""
    return f"{server}{SEPARATOR}{tool}"


@dataclass(frozen=True)
class McpAnnotations:
    """The server's hints about a tool, as listed (None: the server did not say)."""

    title: str | None = None
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None

    @property
    def may_destroy(self) -> bool:
        """MCP's defaults: a tool not marked read-only is destructive unless it says it is not."""
        return self.read_only is not True and self.destructive is not False

    def labels(self) -> tuple[str, ...]:
        """Short words for the approval card, e.g. ("destructive", "open world")."""
        if self.read_only is True:
            labels = ["read-only"]
        elif self.destructive is True:
            labels = ["destructive"]
        elif self.destructive is False:
            labels = ["not destructive"]
        else:
            labels = ["may be destructive (not annotated)"]
        if self.idempotent is True and self.read_only is not True:
            labels.append("idempotent")
        if self.open_world is True:
            labels.append("open world")
        return tuple(labels)


@dataclass(frozen=True)
class McpApproval:
    """Whether one call waits for a human, and the rule that decided (for the audit log)."""

    kind: Literal["approval_required", "runs_freely"]
    rule: str

    @property
    def required(self) -> bool:
        return self.kind == "approval_required"


Caller = Callable[[str, dict[str, Any]], Awaitable[str]]
"""Sends one `tools/call` to the tool's server and returns the result text (or raises)."""


class McpTool:
    """An MCP server's tool offered to the model as `NAME__TOOL`, schema passed through."""

    def __init__(
        self,
        *,
        server: str,
        tool: str,
        description: str | None,
        parameters: dict[str, Any],
        annotations: McpAnnotations,
        config: McpServerConfig,
        caller: Caller,
    ) -> None:
        self.server = server
        self.tool = tool
        self.annotations = annotations
        self._name = qualified_name(server, tool)
        self._description = description if description is not None else (annotations.title or tool)
        self._parameters = parameters
        self._config = config
        self._caller = caller
        self.quarantined = False
        """Its listing differs from the pinned definition (`pins.py`): every call waits."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters(self) -> dict[str, Any]:
        return self._parameters

    @property
    def title(self) -> str:
        """What the card calls the tool: its title, else its own name."""
        return self.annotations.title or self.tool

    @property
    def override(self) -> McpToolOverride | None:
        """Its `[mcp_servers.NAME.tools.TOOL]` section, if the policy has one."""
        return self._config.tools.get(self.tool)

    def requires_approval(self) -> bool:
        """Without arguments: True unless no call of this tool can ever wait."""
        if self.quarantined:
            return True
        mode = self._mode()
        if mode == "never":
            return False
        if mode == "annotations":
            return self.annotations.read_only is not True
        return True

    def needs_approval(self, arguments: Mapping[str, Any]) -> bool:
        return self.decide(arguments).required

    def decide(self, arguments: Mapping[str, Any]) -> McpApproval:
        """Override first, then the server's mode; rules are matched like the built-ins'."""
        where = f"mcp_servers.{self.server}"
        override = self._config.tools.get(self.tool)
        if override is not None:
            where = f"{where}.tools.{self.tool}"
        if self.quarantined:  # the strictest of its rule and `always`: always, whatever it says
            return McpApproval("approval_required", f"{where}: quarantined (definition changed)")
        mode = self._mode()
        if mode == "rules" and override is not None:
            defaults = schema_defaults(self._parameters)
            for index, rule in enumerate(override.rules):
                if rule.matches(arguments, defaults):
                    return McpApproval(
                        "approval_required", f"{where}.rules[{index}] ({rule.label})"
                    )
            return McpApproval("runs_freely", f"{where}: no rule matched")
        if mode == "always":
            return McpApproval("approval_required", f"{where}: approval = always")
        if mode == "never":
            return McpApproval("runs_freely", f"{where}: approval = never")
        if self.annotations.read_only is True:
            return McpApproval("runs_freely", f"{where}: approval = annotations (readOnlyHint)")
        return McpApproval(
            "approval_required", f"{where}: approval = annotations (not annotated read-only)"
        )

    def approval_summary(self) -> str:
        """When calls wait, in a few words (for `/opsgate help`)."""
        if not self.requires_approval():
            return "runs without approval"
        override = self._config.tools.get(self.tool)
        seen = f" (preview: {override.preview})" if override and override.preview else ""
        if self._mode() == "rules" and override is not None:
            return "asks for approval for " + "; ".join(r.label for r in override.rules) + seen
        return "asks for approval" + seen

    async def invoke(self, arguments: dict[str, Any]) -> str:
        """Send exactly one `tools/call`; a failure raises `ToolError` for the model to read."""
        return await self._caller(self.tool, arguments)

    def _mode(self) -> str:
        override = self._config.tools.get(self.tool)
        if override is not None and override.approval is not None:
            return override.approval
        return self._config.approval

    def __repr__(self) -> str:
        return f"McpTool({self._name!r})"


def selects(entry: str, tool_name: str) -> bool:
    """Whether a channel's `tools` list entry names `tool_name`: "NAME__TOOL" exactly, or
    "NAME__*" for every tool of server NAME."""
    if entry.endswith(SEPARATOR + "*"):
        return tool_name.startswith(entry[:-1]) and len(tool_name) > len(entry) - 1
    return entry == tool_name
