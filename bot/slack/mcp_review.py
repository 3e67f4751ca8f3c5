"""The review card of a changed MCP tool, and its two buttons.

At start-up every quarantined tool (`bot.runs.tool_pins`) gets one card in `[mcp]
review_channel`, once per listed definition across restarts and replicas (its key is claimed
among the store's seen events, kept for `SEEN_EVENT_TTL`): the difference field by field,
"Accept the new definition" and "Keep quarantined". Only the people and groups of `[mcp]
mcp_admins` may click either; anyone else is told so, privately, and nothing changes.
Accepting pins the listed definition (`Store.accept_tool_definition`, audited
`mcp_tool_accepted`) and lifts the quarantine at once; keeping it leaves the tool quarantined
and the card says who decided. Without a review channel the change is only logged.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt.async_app import AsyncAck
from slack_sdk.web.async_client import AsyncWebClient

from ..approvals import Refused
from ..policy import Policy
from ..runs.service import RunService
from ..runs.tool_pins import ToolReview
from ..store import McpPin, OutboxEntry, Store
from ..tools.mcp.tool import ToolDefinition, changed_fields
from .answers import refusal_text
from .ids import clicker

__all__ = ["ACTION_MCP_ACCEPT", "ACTION_MCP_KEEP", "McpReview", "post_reviews", "review_blocks"]

logger = logging.getLogger("opsgate.mcp")

ACTION_MCP_ACCEPT = "opsgate_mcp_accept"
ACTION_MCP_KEEP = "opsgate_mcp_keep"
_NOTICE = 2
"""The outbox priority of notices (`bot.slack.outbox.NOTICE`)."""
_SHOWN = 600


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def review_blocks(pin: McpPin) -> list[dict[str, Any]]:
    """The card: which tool, each changed field (pinned and listed), the two buttons."""
    assert pin.listed_definition is not None and pin.listed_digest is not None
    changes = changed_fields(
        ToolDefinition.from_json(pin.definition), ToolDefinition.from_json(pin.listed_definition)
    )
    name = f"{pin.server}__{pin.tool}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": "MCP tool changed"}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"`{name}` changed since it was reviewed: every call of it needs "
                "approval until an MCP admin accepts the new definition.",
            },
        },
    ]
    for field, change in changes.items():
        text = (
            f"*{field}*\nreviewed: `{_shown(change['before'])}`\n"
            f"listed now: `{_shown(change['after'])}`"
        )
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    value = "\t".join((pin.server, pin.tool, pin.listed_digest))
    blocks.append(
        {
            "type": "actions",
            "block_id": "opsgate_mcp_review",
            "elements": [
                _button("Accept the new definition", ACTION_MCP_ACCEPT, value, "primary"),
                _button("Keep quarantined", ACTION_MCP_KEEP, value, None),
            ],
        }
    )
    return blocks


def _button(text: str, action: str, value: str, style: str | None) -> dict[str, Any]:
    button = {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": action,
        "value": value,
    }
    return button | ({"style": style} if style else {})


async def post_reviews(store: Store, policy: Policy) -> int:
    """Put a review card in the outbox for each quarantined tool not yet shown; how many."""
    channel = policy.mcp.review_channel
    if channel is None:
        return 0
    posted = 0
    for pin in await store.mcp_pins():
        if pin.state != "quarantined" or pin.listed_digest is None:
            continue
        key = f"mcp-review:{pin.server}:{pin.tool}:{pin.listed_digest}"
        if not await store.first_sighting(key):
            continue
        params = {
            "channel": channel,
            "text": f"MCP tool {pin.server}__{pin.tool} changed since it was reviewed",
            "blocks": review_blocks(pin),
        }
        await store.put_outbox([OutboxEntry("chat.postMessage", params, _NOTICE, channel)])
        posted += 1
    return posted


_SAID: dict[ToolReview, str] = {
    "accepted": "<@{user}> accepted the new definition of `{name}`.",
    "decided_before": "`{name}`: that definition was already decided on.",
    "kept": "<@{user}> kept `{name}` quarantined.",
}
_NOT_AN_ADMIN = "Only the MCP admins ([mcp] mcp_admins) may decide on a changed tool."


class McpReview:
    """The review card's two buttons. Who may click is the one authorisation's answer
    (`Approvals.listed`, its cached user-group members), as for every other button."""

    def __init__(self, service: RunService) -> None:
        self.service = service

    async def accept(self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await self._decide(body, client, accept=True)

    async def keep(self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await self._decide(body, client, accept=False)

    async def _decide(self, body: dict[str, Any], client: AsyncWebClient, *, accept: bool) -> None:
        user, team = clicker(body)
        channel = str((body.get("channel") or {}).get("id") or "")
        if not team:  # a click that hides its workspace is refused, as every card click is
            refused = Refused("unknown_workspace", "approve", "the actor's workspace is unknown")
            await client.chat_postEphemeral(channel=channel, user=user, text=refusal_text(refused))
            return
        ts = str((body.get("container") or {}).get("message_ts") or "")
        actions = body.get("actions") or [{}]
        server, _, rest = str(actions[0].get("value") or "").partition("\t")
        tool, _, digest = rest.partition("\t")
        if not (user and server and tool and digest):
            return
        done = await self.service.review_tool(user, server, tool, digest, accept=accept)
        if done == "not_an_admin":
            await client.chat_postEphemeral(channel=channel, user=user, text=_NOT_AN_ADMIN)
            return
        said = _SAID[done].format(user=user, name=f"{server}__{tool}")
        section = {"type": "section", "text": {"type": "mrkdwn", "text": said}}
        await client.chat_update(channel=channel, ts=ts, text=said, blocks=[section])
