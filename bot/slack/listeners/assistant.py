"""The AI-app container (Slack's agent split view): a conversation started there is offered the
policy's suggested prompts, and each change of the channel the user looks at is recorded, so
that the next run there gets that channel's instructions and tools (`bot.runs.container`).
Messages in the container are DMs in a thread: `listeners/messages.py` takes them like any
other, and they are sessions like any other thread."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from ...runs.output import Thread
from ...runs.service import RunService
from ..output import SlackThreadOutput

__all__ = ["register"]

logger = logging.getLogger("opsgate.slack.assistant")


def _thread_of(event: dict[str, Any], body: dict[str, Any]) -> tuple[Thread, str | None] | None:
    """The conversation, and the channel its user looks at (None when not in a channel)."""
    started = event.get("assistant_thread")
    if not isinstance(started, dict):
        return None
    channel, ts = started.get("channel_id"), started.get("thread_ts")
    found = started.get("context")
    context: dict[str, Any] = found if isinstance(found, dict) else {}
    team = str(body.get("team_id") or context.get("team_id") or "")
    if not (isinstance(channel, str) and channel and isinstance(ts, str) and ts and team):
        return None
    viewing = context.get("channel_id")
    return Thread(team, channel, ts), viewing if isinstance(viewing, str) and viewing else None


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    @app.event("assistant_thread_started")
    async def on_started(event: dict[str, Any], body: dict[str, Any]) -> None:
        found = _thread_of(event, body)
        if found is None:
            logger.warning("assistant_thread_started without its thread; ignored")
            return
        thread, viewing = found
        prompts = await service.container.started(thread, viewing)
        await output.replies.suggest_prompts(thread, prompts)

    @app.event("assistant_thread_context_changed")
    async def on_context_changed(event: dict[str, Any], body: dict[str, Any]) -> None:
        found = _thread_of(event, body)
        if found is not None:
            await service.container.viewing(*found)
