"""One MCP server tool as an agent_core `Tool`, with what the approval card shows about it.

Whether a call waits is the policy's to say (`bot.policy.mcp_approval`, by the tool's
`[mcp_servers.NAME.tools.TOOL]` override, its server's `approval` and its annotations): the tool
carries its server's section (`server_config`) for the policy to read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bot.policy import McpServerConfig, mcp_approval, mcp_requires_approval, qualified_name

__all__ = ["McpAnnotations", "McpTool"]


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
    def server_config(self) -> McpServerConfig:
        """Its server's `[mcp_servers.NAME]` section, which decides when its calls wait."""
        return self._config

    def requires_approval(self) -> bool:
        """Without arguments: True unless no call of this tool can ever wait."""
        return mcp_requires_approval(self)

    def needs_approval(self, arguments: Mapping[str, Any]) -> bool:
        return mcp_approval(self, arguments).required

    async def invoke(self, arguments: dict[str, Any]) -> str:
        """Send exactly one `tools/call`; a failure raises `ToolError` for the model to read."""
        return await self._caller(self.tool, arguments)

    def __repr__(self) -> str:
        return f"McpTool({self._name!r})"
