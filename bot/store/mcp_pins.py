"""Pinned MCP tool definitions (`mcp_tool_pins`): the first listing of a tool is pinned; a later
listing with another digest quarantines it (the listed definition is kept beside the pin) until
an MCP admin accepts it. Every change is one transaction with its audit row (`mcp_tool_pinned`,
`mcp_tool_changed`, `mcp_tool_accepted`), so replicas starting together pin once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from .core import StoreCore
from .db import Row

__all__ = ["ListedTool", "McpPin", "McpPins"]

PinState = Literal["pinned", "quarantined"]


@dataclass(frozen=True, slots=True)
class ListedTool:
    """One tool as a server listed it: its digest and its definition's canonical JSON."""

    tool: str
    digest: str
    definition: str


@dataclass(frozen=True, slots=True)
class McpPin:
    server: str
    tool: str
    digest: str
    """The reviewed definition's digest."""
    definition: str
    state: PinState
    listed_digest: str | None
    """While quarantined: the digest of the definition the server lists now."""
    listed_definition: str | None
    pinned_at: datetime
    accepted_by: str | None = None


class McpPins(StoreCore):
    async def pin_tools(
        self,
        server: str,
        listed: Sequence[ListedTool],
        *,
        changes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[McpPin]:
        """Pin each tool seen for the first time, quarantine each whose digest differs from
        its pin (`changes`: the fields that differ, by tool, for the audit row), and return
        every listed tool's pin. A quarantined tool listed with its pinned digest again stays
        quarantined until accepted (the server may flip back and forth)."""
        found = []
        async with self._db.transaction("pin_tools") as tx:
            await self._db.advisory_lock(tx, 0x6D6370, f"mcp:{server}")
            for item in listed:
                row = await tx.fetch_one(
                    "SELECT * FROM mcp_tool_pins WHERE server = :server AND tool = :tool"
                    + self._db.for_update,
                    {"server": server, "tool": item.tool},
                )
                if row is None:
                    await tx.execute(
                        "INSERT INTO mcp_tool_pins (server, tool, digest, definition, state, "
                        "pinned_at) VALUES (:server, :tool, :digest, :definition, 'pinned', :now)",
                        {
                            "server": server,
                            "tool": item.tool,
                            "digest": item.digest,
                            "definition": item.definition,
                            "now": self._now(),
                        },
                    )
                    await self._write_audit(
                        tx,
                        "mcp_tool_pinned",
                        actor=None,
                        details={"server": server, "tool": item.tool, "digest": item.digest},
                    )
                elif row["digest"] != item.digest and row["listed_digest"] != item.digest:
                    await tx.execute(
                        "UPDATE mcp_tool_pins SET state = 'quarantined', listed_digest = "
                        ":digest, listed_definition = :definition, changed_at = :now "
                        "WHERE server = :server AND tool = :tool",
                        {
                            "server": server,
                            "tool": item.tool,
                            "digest": item.digest,
                            "definition": item.definition,
                            "now": self._now(),
                        },
                    )
                    await self._write_audit(
                        tx,
                        "mcp_tool_changed",
                        actor=None,
                        details={
                            "server": server,
                            "tool": item.tool,
                            "pinned_digest": row["digest"],
                            "listed_digest": item.digest,
                            "changes": dict((changes or {}).get(item.tool, {})),
                        },
                    )
                found.append(await self._pin(tx, server, item.tool))
        return found

    async def accept_tool_definition(
        self, server: str, tool: str, digest: str, *, user_id: str
    ) -> bool:
        """Pin the listed definition `digest` of a quarantined tool (conditional: False when it
        is not quarantined with that digest, e.g. a second click)."""
        async with self._db.transaction("accept_tool_definition") as tx:
            touched = await tx.execute(
                "UPDATE mcp_tool_pins SET digest = listed_digest, definition = "
                "listed_definition, state = 'pinned', listed_digest = NULL, listed_definition "
                "= NULL, pinned_at = :now, accepted_by = :user WHERE server = :server AND "
                "tool = :tool AND state = 'quarantined' AND listed_digest = :digest",
                {
                    "server": server,
                    "tool": tool,
                    "digest": digest,
                    "user": user_id,
                    "now": self._now(),
                },
            )
            if touched == 0:
                return False
            await self._write_audit(
                tx,
                "mcp_tool_accepted",
                actor=user_id,
                details={"server": server, "tool": tool, "digest": digest},
            )
            return True

    async def mcp_pins(self) -> list[McpPin]:
        async with self._db.reading("mcp_pins") as tx:
            rows = await tx.fetch_all("SELECT * FROM mcp_tool_pins ORDER BY server, tool")
        return [self._pin_model(r) for r in rows]

    async def _pin(self, tx: Any, server: str, tool: str) -> McpPin:
        row = await tx.fetch_one(
            "SELECT * FROM mcp_tool_pins WHERE server = :server AND tool = :tool",
            {"server": server, "tool": tool},
        )
        return self._pin_model(row)

    def _pin_model(self, row: Row) -> McpPin:
        return McpPin(
            server=row["server"],
            tool=row["tool"],
            digest=row["digest"],
            definition=row["definition"],
            state=row["state"],
            listed_digest=row["listed_digest"],
            listed_definition=row["listed_definition"],
            pinned_at=self._db.time_out(row["pinned_at"]) or self._moment(),
            accepted_by=row["accepted_by"],
        )
