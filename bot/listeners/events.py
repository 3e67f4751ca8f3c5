"""Events API listeners: mentions, DMs and thread replies start or continue runs."""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext

from ..runner import Runner, Thread

__all__ = ["classify_message", "register"]

logger = logging.getLogger("opsgate.events")

_MENTION = re.compile(r"<@[UW][A-Z0-9]+(?:\|[^>]*)?>")
_ALLOWED_SUBTYPES = {None, "thread_broadcast", "file_share"}


def strip_mentions(text: str) -> str:
    return _MENTION.sub("", text).strip()


def classify_message(
    event: dict[str, Any], bot_user_id: str | None
) -> Literal["start", "continue", "ignore"]:
    """What a `message` event means for us. Mentions in channels arrive as `app_mention` too,
    so here they are ignored; bot messages, our own, edits and joins are always ignored."""
    if event.get("subtype") not in _ALLOWED_SUBTYPES:
        return "ignore"
    user = event.get("user")
    if not user or event.get("bot_id") or user == bot_user_id:
        return "ignore"
    is_reply = bool(event.get("thread_ts")) and event.get("thread_ts") != event.get("ts")
    if event.get("channel_type") == "im":
        return "continue" if is_reply else "start"
    if bot_user_id and f"<@{bot_user_id}" in (event.get("text") or ""):
        return "ignore"
    return "continue" if is_reply else "ignore"


def _team(body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> str:
    return str(body.get("team_id") or event.get("team") or context.team_id or "")


async def _first_time(runner: Runner, body: dict[str, Any], event: dict[str, Any]) -> bool:
    """Slack retries unacknowledged events, and a channel mention arrives twice (as
    `app_mention` and as `message`): both must start one run only."""
    store = runner.deps.store
    event_id = body.get("event_id")
    if event_id and not await store.first_sighting(str(event_id)):
        return False
    return await store.first_sighting(f"message:{event.get('channel')}:{event.get('ts')}")


def register(app: AsyncApp, runner: Runner) -> None:
    @app.event("app_mention")
    async def on_mention(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        if event.get("bot_id") or event.get("user") == context.bot_user_id:
            return
        if not await _first_time(runner, body, event):
            return
        thread = Thread(
            _team(body, event, context),
            str(event["channel"]),
            str(event.get("thread_ts") or event["ts"]),
        )
        await runner.on_message(
            thread,
            user=str(event.get("user")),
            text=strip_mentions(event.get("text") or ""),
            message_ts=str(event["ts"]),
        )

    @app.event("message")
    async def on_message(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        kind = classify_message(event, context.bot_user_id)
        if kind == "ignore":
            return
        thread = Thread(
            _team(body, event, context),
            str(event["channel"]),
            str(event.get("thread_ts") or event["ts"]),
        )
        in_channel_thread = kind == "continue" and event.get("channel_type") != "im"
        if in_channel_thread and not await runner.owns_thread(thread):
            return
        if not await _first_time(runner, body, event):
            return
        await runner.on_message(
            thread,
            user=str(event["user"]),
            text=strip_mentions(event.get("text") or ""),
            message_ts=str(event["ts"]),
        )

    @app.event(re.compile(".*"))
    async def on_other_event() -> None:
        """Answer every other subscribed event with 200, so Slack never disables the app."""
