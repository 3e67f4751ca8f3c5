"""`opsgate mcp tools [--json]`: every pinned MCP tool with its digest and state, read from the
database (read-only; the servers are not started).

A `quarantined` tool's server lists a definition other than the reviewed one (its digest is
shown as `listed`): its calls need approval until an MCP admin accepts the new definition.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TextIO

from bot.errors import McpToolsError

from ..settings import DatabaseURL, load_settings
from ..store import McpPin, SQLiteStore, StoreError, open_store

__all__ = ["mcp_tools_command", "print_pins"]


def mcp_tools_command(*, as_json: bool) -> int:
    settings = load_settings(mode="audit")
    pins = asyncio.run(_pins(settings.opsgate_db))
    print_pins(pins, as_json=as_json, out=sys.stdout)
    return 0


async def _pins(db: Path | DatabaseURL) -> list[McpPin]:
    try:
        if isinstance(db, DatabaseURL):
            async with open_store(db, migrate=False) as store:
                return await store.mcp_pins()
        if not await asyncio.to_thread(db.is_file):
            return []
        async with SQLiteStore(db) as sqlite:
            return await sqlite.mcp_pins()
    except StoreError as exc:
        raise McpToolsError(f"mcp tools: cannot read the pins: {exc}") from None


def print_pins(pins: list[McpPin], *, as_json: bool, out: TextIO) -> None:
    if as_json:
        for pin in pins:
            row = {
                "tool": f"{pin.server}__{pin.tool}",
                "server": pin.server,
                "state": pin.state,
                "digest": pin.digest,
                "listed_digest": pin.listed_digest,
                "pinned_at": pin.pinned_at.isoformat(),
                "accepted_by": pin.accepted_by,
            }
            print(json.dumps(row, sort_keys=True), file=out)
        return
    if not pins:
        print("no MCP tool is pinned yet (tools are pinned when the bot starts)", file=out)
        return
    for pin in pins:
        listed = f" (listed now: {pin.listed_digest})" if pin.listed_digest else ""
        print(f"{pin.server}__{pin.tool}  {pin.state}  {pin.digest}{listed}", file=out)
