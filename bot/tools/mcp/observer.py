"""Where each MCP server's call outcomes and restarts are reported: `bot.observability.Metrics`
implements `McpObserver` (the method names are the same), so this package never calls
prometheus-client itself."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from bot.observability.metrics import McpCallOutcome

__all__ = ["McpObserver", "NoMcpObserver"]


@runtime_checkable
class McpObserver(Protocol):
    """Where call outcomes and restarts are counted; `bot.observability.Metrics` is one."""

    def add_mcp_servers(self, names: Iterable[str]) -> None: ...

    def mcp_call(self, server: str, outcome: McpCallOutcome) -> None: ...

    def mcp_restart(self, server: str) -> None: ...


class NoMcpObserver:
    """Counts nothing: `opsgate check`, and tests that do not look."""

    def add_mcp_servers(self, names: Iterable[str]) -> None:
        pass

    def mcp_call(self, server: str, outcome: McpCallOutcome) -> None:
        pass

    def mcp_restart(self, server: str) -> None:
        pass
