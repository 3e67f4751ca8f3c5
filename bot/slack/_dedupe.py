"""Event dedupe as Bolt listener middleware: one run per message, however often Slack sends it.

Slack retries an event it thinks was not acknowledged (same `event_id`), and a channel mention
arrives twice, as `app_mention` and as `message` (different ids, same channel and `ts`). Each
key is claimed once in the store (`first_sighting`, a conditional insert), so this holds across
processes sharing one database too.

It runs after the listener's own middleware has decided to act on the event: an event that is
ignored must not claim the message, or the other delivery of that message would be dropped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["SeenFirst", "first_delivery"]

SeenFirst = Callable[[str], Awaitable[bool]]
"""Claims a key; True the first time it is seen (the store's `first_sighting`)."""
Next = Callable[[], Awaitable[None]]


def first_delivery(seen_first: SeenFirst) -> Callable[..., Awaitable[None]]:
    """A listener middleware that lets each event, and each message, through once."""

    # Bolt passes arguments by name: `next` it must be.
    async def drop_repeats(body: dict[str, Any], event: dict[str, Any], next: Next) -> None:
        event_id = body.get("event_id")
        if event_id and not await seen_first(str(event_id)):
            return
        if not await seen_first(f"message:{event.get('channel')}:{event.get('ts')}"):
            return
        await next()

    return drop_repeats
