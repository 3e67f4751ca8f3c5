"""Cards marked with their ledger id (Slack message metadata), and finding them again.

A process killed while `chat.postMessage` for a card was on its way never stored where the card
went: Slack may have posted it, with live buttons. Every card carries metadata naming its call,
so the next try looks in the thread first (`conversations.replies`) and adopts the card it
finds instead of posting a second one (docs/architecture.md, "The data path of one
request", step 7).
"""

from __future__ import annotations

from typing import Any, get_args

from slack_sdk.web.async_client import AsyncWebClient

from ..runs.views import CardCall, CardRef
from ..store.states import CardLock

__all__ = ["CARD_EVENT", "card_metadata", "find_marked_card"]

CARD_EVENT = "opsgate_card"
"""The metadata `event_type` of an approval card."""
_PAGE = 200
_MAX_PAGES = 50
"""A thread longer than this many pages is not searched further (10,000 replies)."""


def card_metadata(card: CardCall) -> dict[str, Any]:
    """The metadata posted with `card`: its call, and whether it was posted locked (the lock
    must survive an adoption: the arguments file may never have been attached)."""
    return {
        "event_type": CARD_EVENT,
        "event_payload": {"ledger_id": card.ledger_id, "locked": card.locked or ""},
    }


async def find_marked_card(
    client: AsyncWebClient, bot_id: str, channel: str, thread_ts: str, ledger_id: str
) -> CardRef | None:
    """The first message in the thread posted by this bot (`bot_id`) whose metadata names
    `ledger_id`. Raises slack_sdk/aiohttp errors (the caller treats them as "not found")."""
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        response = await client.conversations_replies(
            channel=channel,
            ts=thread_ts,
            include_all_metadata=True,
            limit=_PAGE,
            cursor=cursor,
        )
        for message in response.get("messages") or []:
            if (found := _card_of(message, bot_id, ledger_id)) is not None:
                return CardRef(channel, found[0], found[1])
        cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
        if not (cursor and response.get("has_more")):
            return None
    return None


def _card_of(message: Any, bot_id: str, ledger_id: str) -> tuple[str, CardLock | None] | None:
    """(ts, lock) when `message` is this bot's card for `ledger_id`."""
    if not isinstance(message, dict) or message.get("bot_id") != bot_id:
        return None
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != CARD_EVENT:
        return None
    payload = metadata.get("event_payload")
    if not isinstance(payload, dict) or payload.get("ledger_id") != ledger_id:
        return None
    ts = message.get("ts")
    if not isinstance(ts, str) or not ts:
        return None
    locked = payload.get("locked")
    lock: CardLock | None = None
    if locked in get_args(CardLock):
        lock = locked
    elif locked:  # a lock this version does not know: stay locked rather than approvable
        lock = "arguments_not_attached"
    return ts, lock
