"""Pinning the MCP servers' tool definitions at start-up, and quarantining the changed ones.

Each server's listing is compared with the store's pins (`Store.pin_tools`, one transaction per
server, audited): a tool seen for the first time is pinned; one whose definition differs from
its pin (any field: description, input schema, annotations) is quarantined: `McpTool.quarantined`
makes every call of it wait for approval (the strictest of its rule and `always`, never
`annotations`, so a tool that newly claims `readOnlyHint: true` gains nothing), and its card
says "this tool changed since it was reviewed". The change is logged field by field until an
MCP admin accepts it. A server with `pin = false` is not pinned, and start-up says so.

The same check runs on each later listing of a running server (`repin_listing`): after a
restart, or when the server says its tools changed. A changed tool is quarantined at once, in
the store and on the tool the model is offered.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..policy import McpServerConfig
from ..store import ListedTool, McpPin, Store
from ..tools.mcp import McpTool
from ..tools.mcp_tool import ToolDefinition, changed_fields, definition_of
from .context import RunContext

__all__ = ["ToolReview", "pin_mcp_tools", "repin_listing", "review_tool"]

logger = logging.getLogger("opsgate.mcp")


async def pin_mcp_tools(
    store: Store, tools: Sequence[McpTool], configs: Mapping[str, McpServerConfig]
) -> list[McpPin]:
    """Pin or check every listed tool; mark the quarantined ones; their pins."""
    pinned = {(p.server, p.tool): p for p in await store.mcp_pins()}
    quarantined: list[McpPin] = []
    for server, config in configs.items():
        mine = [t for t in tools if t.server == server]
        if not config.pin:
            logger.warning(
                "mcp_servers.%s: pin = false: its tools' definitions are not pinned, so a "
                "changed description, schema or readOnlyHint takes effect unreviewed",
                server,
            )
            continue
        listed, changes = [], {}
        for tool in mine:
            definition = definition_of(tool)
            listed.append(ListedTool(tool.tool, definition.digest, definition.canonical()))
            old = pinned.get((server, tool.tool))
            if old is not None and old.digest != definition.digest:
                before = ToolDefinition.from_json(old.definition)
                changes[tool.tool] = changed_fields(before, definition)
        by_tool = {t.tool: t for t in mine}
        for pin in await store.pin_tools(server, listed, changes=changes):
            if pin.state == "quarantined":
                by_tool[pin.tool].quarantined = True
                quarantined.append(pin)
                _warn(pin, changes.get(pin.tool))
    return quarantined


async def repin_listing(
    store: Store,
    listed: Sequence[McpTool],
    configs: Mapping[str, McpServerConfig],
    offered: Mapping[str, object],
) -> list[McpPin]:
    """Check a running server's new listing against the pins; quarantine the tool offered
    under each changed one's name (`offered`: the bot's tools by name). A tool listed for
    the first time is pinned but not offered before the next start."""
    quarantined = await pin_mcp_tools(store, listed, configs)
    for tool in listed:
        live = offered.get(tool.name)
        if tool.quarantined and isinstance(live, McpTool):
            live.quarantined = True
        elif live is None:
            logger.warning(
                "MCP server %r now lists %r; it is offered from the next start",
                tool.server,
                tool.tool,
            )
    return quarantined


ToolReview = Literal["accepted", "decided_before", "kept", "not_an_admin"]
"""What a click on a changed tool's review card did."""


async def review_tool(
    ctx: RunContext, user: str, server: str, tool: str, digest: str, *, accept: bool
) -> ToolReview:
    """An MCP admin (`[mcp] mcp_admins`, users or user groups: the one group lookup of
    `bot.approvals`) accepts the listed definition `digest` of a quarantined tool (pinned, and
    the quarantine lifted at once) or keeps it quarantined; anyone else changes nothing."""
    if not await ctx.approvals.listed(ctx.policy.mcp.mcp_admins, user):
        return "not_an_admin"
    if not accept:
        return "kept"
    if not await ctx.store.accept_tool_definition(server, tool, digest, user_id=user):
        return "decided_before"
    live = ctx.tools.get(f"{server}__{tool}")
    if isinstance(live, McpTool):
        live.quarantined = False
    return "accepted"


def _warn(pin: McpPin, changes: Mapping[str, Any] | None) -> None:
    if changes is None and pin.listed_definition is not None:
        changes = changed_fields(
            ToolDefinition.from_json(pin.definition),
            ToolDefinition.from_json(pin.listed_definition),
        )
    said = "; ".join(
        f"{field}: {json.dumps(c['before'], sort_keys=True)} -> "
        f"{json.dumps(c['after'], sort_keys=True)}"
        for field, c in (changes or {}).items()
    )
    logger.warning(
        "MCP tool %s__%s changed since it was reviewed (%s); quarantined: every call needs "
        "approval until an MCP admin accepts the new definition (digest %s)",
        pin.server,
        pin.tool,
        said or "definition differs",
        pin.listed_digest,
    )
