"""The agent's place in Slack: a conversation opened there is offered the policy's suggested
prompts, and each change of the channel the user looks at is recorded, so that the next run
there gets that channel's instructions and tools (`bot.runs.context`). Messages there are
DMs: `listeners/messages.py` takes them like any other, and they are sessions like any thread.

Both of Slack's experiences are handled:

- the agent messaging experience (`features.agent_view` in the manifest, the only one new
  apps can use): the user opening the app's Messages tab is `app_home_opened` with `tab:
  "messages"`, and what they look at is `app_context_changed` (ordered `context.entities`),
  for the DM as a whole (each message there starts its own thread);
- the older assistant experience (`assistant_view`): `assistant_thread_started` and
  `assistant_thread_context_changed`, for one thread of the split view.
"""

from __future__ import annotations

import logging
from typing import Any

from ...runs.context import WHOLE_DM
from ...runs.output import Thread
from ...runs.service import RunService
from ..output import SlackThreadOutput

__all__ = ["Assistant", "viewed_channel"]

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


def viewed_channel(context: Any) -> str | None:
    """The most relevant channel among `app_context_changed`'s entities (Slack orders them by
    relevance): a channel, or the channel of a message; None when it names none."""
    entities = context.get("entities") if isinstance(context, dict) else None
    for entity in entities if isinstance(entities, list) else ():
        if not isinstance(entity, dict):
            continue
        value = entity.get("value")
        match entity.get("type"):
            case "slack#/types/channel_id" if isinstance(value, str) and value:
                return value
            case "slack#/types/message_context" if isinstance(value, dict):
                channel = value.get("channel_id")
                if isinstance(channel, str) and channel:
                    return channel
    return None


def _whole_dm(event: dict[str, Any], body: dict[str, Any]) -> Thread | None:
    channel = event.get("channel")
    team = str(body.get("team_id") or "")
    if not (isinstance(channel, str) and channel and team):
        return None
    return Thread(team, channel, WHOLE_DM)


class Assistant:
    """The AI-app container's events. `messages_opened` is registered before the Home tab's
    listener (with `messages_tab` as its matcher): Bolt runs the first that matches, and
    `app_home_opened` with `tab: "messages"` is this class's."""

    def __init__(self, service: RunService, output: SlackThreadOutput) -> None:
        self.service = service
        self.output = output

    async def messages_tab(self, event: dict[str, Any]) -> bool:
        return event.get("tab") == "messages"

    async def messages_opened(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        dm = _whole_dm(event, body)
        if dm is None:
            logger.warning("app_home_opened (messages) without its channel; ignored")
            return
        await self.output.replies.suggest_prompts(dm, self.service.suggested_prompts())

    async def app_context(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        dm = _whole_dm(event, body)
        if dm is None:
            logger.warning("app_context_changed without its channel; ignored")
            return
        await self.service.viewing(dm, viewed_channel(event.get("context")))

    async def started(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        found = _thread_of(event, body)
        if found is None:
            logger.warning("assistant_thread_started without its thread; ignored")
            return
        thread, viewing = found
        prompts = await self.service.thread_started(thread, viewing)
        await self.output.replies.suggest_prompts(thread, prompts)

    async def context_changed(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        found = _thread_of(event, body)
        if found is not None:
            await self.service.viewing(*found)
