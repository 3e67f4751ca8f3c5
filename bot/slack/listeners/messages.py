"""Events API listeners: mentions, DMs, thread replies and, in `every_message` channels, every
new message start or continue runs; and the agent's place in Slack (the AI-app container),
whose events arrive the same way and whose messages are DMs like any other.

Bot messages are ignored unless the channel's policy allow-lists the bot (`allowed_bots`); the
bot's own messages always are, whatever the policy says, so it can never talk to itself.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from slack_bolt.context.async_context import AsyncBoltContext

from ...policy import Policy, Trigger
from ...runs.context import WHOLE_DM
from ...runs.inbox import MessageDelivery
from ...runs.output import Thread
from ...runs.service import RunService
from ...store import InboxItem
from ..app import SAVED_ROW
from ..output import SlackThreadOutput

__all__ = [
    "Assistant",
    "Messages",
    "classify_message",
    "event_author",
    "message_of",
    "message_text",
    "other_event",
    "viewed_channel",
]

_Saving = tuple[MessageDelivery, Sequence[str]]
"""A message to act on as the inbox saves it: the delivery and its own dedupe keys."""
_MessageOf = Callable[[Mapping[str, Any], AsyncBoltContext], Awaitable[_Saving | None]]


logger = logging.getLogger("opsgate.events")

_MENTION = re.compile(r"<@[UW][A-Z0-9]+(?:\|[^>]*)?>")
_ALLOWED_SUBTYPES = {None, "thread_broadcast", "file_share", "bot_message"}
_ATTACHMENT_FIELDS = ("pretext", "author_name", "title", "text", "footer")
_TEXT_MAX = 20_000
"""Longest message text handed to the model (alerts can carry whole logs)."""


def strip_mentions(text: str) -> str:
    return _MENTION.sub("", text).strip()


def message_text(event: Mapping[str, Any]) -> str:
    """The message's text, with its attachments' text: alert integrations often put everything
    in attachments and leave `text` empty or a one-line summary."""
    parts = [str(event.get("text") or "").strip()]
    for attachment in event.get("attachments") or []:
        if not isinstance(attachment, Mapping):
            continue
        found = [str(attachment[k]).strip() for k in _ATTACHMENT_FIELDS if attachment.get(k)]
        for field in attachment.get("fields") or []:
            if isinstance(field, Mapping) and (field.get("title") or field.get("value")):
                found.append(f"{field.get('title') or ''}: {field.get('value') or ''}".strip())
        if not found and attachment.get("fallback"):
            found.append(str(attachment["fallback"]).strip())
        parts += [p for p in found if p and p not in parts]
    if not any(parts):  # a blocks-only message: its section and header texts
        for block in event.get("blocks") or []:
            if isinstance(block, Mapping) and block.get("type") in ("section", "header"):
                text = block.get("text")
                if isinstance(text, Mapping) and text.get("text"):
                    parts.append(str(text["text"]).strip())
    return "\n".join(p for p in parts if p)[:_TEXT_MAX]


def _is_own(event: Mapping[str, Any], body: Mapping[str, Any], context: AsyncBoltContext) -> bool:
    profile = event.get("bot_profile") or {}
    app_id = event.get("app_id") or profile.get("app_id")
    user = event.get("user")
    bot_id = event.get("bot_id")
    return bool(
        (user and user == context.bot_user_id)
        or (bot_id and bot_id == context.bot_id)
        or (app_id and app_id == body.get("api_app_id"))
    )


def event_author(
    event: Mapping[str, Any],
    body: Mapping[str, Any],
    context: AsyncBoltContext,
    policy: Policy,
) -> str | None:
    """Who wrote the message, if it may drive runs: a user id, or the bot id (app id when it
    has none) of an integration the channel allow-lists. None for anything to ignore."""
    if _is_own(event, body, context):
        return None
    profile = event.get("bot_profile") or {}
    bot_id = event.get("bot_id") or profile.get("id")
    app_id = event.get("app_id") or profile.get("app_id")
    if bot_id or app_id or event.get("subtype") == "bot_message":
        if policy.allows_bot(event.get("channel"), bot_id, app_id):
            return str(bot_id or app_id)
        return None
    user = event.get("user")
    return str(user) if user else None


def classify_message(
    event: Mapping[str, Any], *, bot_user_id: str | None, trigger: Trigger
) -> Literal["start", "continue", "ignore"]:
    """What a `message` event from someone allowed to drive runs means for us.

    Edits, deletions, joins and the like are ignored. A channel mention also arrives as
    `app_mention`; both start the same run, once (the `once` middleware below).
    """
    if event.get("subtype") not in _ALLOWED_SUBTYPES:
        return "ignore"
    is_reply = bool(event.get("thread_ts")) and event.get("thread_ts") != event.get("ts")
    if is_reply:
        return "continue"
    if event.get("channel_type") == "im":
        return "start"
    if bot_user_id and f"<@{bot_user_id}" in (event.get("text") or ""):
        return "start"
    return "start" if trigger == "every_message" else "ignore"


def _team(body: Mapping[str, Any], event: Mapping[str, Any], context: AsyncBoltContext) -> str:
    return str(body.get("team_id") or event.get("team") or context.team_id or "")


Next = Callable[[], Awaitable[None]]


def _incoming(
    body: Mapping[str, Any], event: Mapping[str, Any], context: AsyncBoltContext, author: str
) -> _Saving:
    """The message as the inbox saves it, and its own dedupe keys: the event's id, and the
    message's channel and ts (a mention arrives as `app_mention` and as `message`; both start
    the same run, once)."""
    thread = Thread(
        _team(body, event, context),
        str(event.get("channel") or ""),
        str(event.get("thread_ts") or event["ts"]),
    )
    delivery = MessageDelivery(
        team=thread.team_id,
        channel=thread.channel_id,
        thread_ts=thread.thread_ts,
        user=author,
        text=strip_mentions(message_text(event)),
        ts=str(event["ts"]),
        author_team=_author_team(event),
    )
    keys = [f"message:{thread.channel_id}:{delivery.ts}"]
    if event_id := body.get("event_id"):
        keys.insert(0, str(event_id))
    return delivery, tuple(keys)


def _author_team(event: Mapping[str, Any]) -> str | None:
    """The author's workspace: `user_team` (set in shared channels), else the event's `team`,
    else an integration's `bot_profile.team_id`. Never the app's own installation team: a
    guest writing in a Slack Connect channel must not pass for a member."""
    profile = event.get("bot_profile") or {}
    team = event.get("user_team") or event.get("team") or profile.get("team_id")
    return str(team) if team else None


def message_of(service: RunService, policy: Policy) -> _MessageOf:
    """What decides whether an event is a message the bot acts on (a mention, a DM, a reply in
    one of its threads, any message in an `every_message` channel), and how it is saved. The
    one intake calls it to save such a request as its message row (one row, one commit, before
    the 200); the listener calls it for a request saved otherwise (replayed at start-up)."""

    async def of(body: Mapping[str, Any], context: AsyncBoltContext) -> _Saving | None:
        event = body.get("event")
        if not isinstance(event, Mapping) or event.get("type") not in ("app_mention", "message"):
            return None
        author = event_author(event, body, context, policy)
        if author is None or not event.get("ts"):
            return None
        if event["type"] == "app_mention":
            return _incoming(body, event, context, author)
        channel = str(event.get("channel") or "")
        kind = classify_message(
            event, bot_user_id=context.bot_user_id, trigger=policy.trigger_for(channel)
        )
        if kind == "ignore":
            return None
        saving = _incoming(body, event, context, author)
        in_channel_thread = kind == "continue" and event.get("channel_type") != "im"
        if in_channel_thread and not await service.owns_thread(saving[0].thread):
            return None
        return saving

    return of


class Messages:
    """Mentions, DMs and replies: each saved once (`once`), then handed to the inbox."""

    def __init__(self, service: RunService, policy: Policy) -> None:
        self.service = service
        self.of = message_of(service, policy)

    # Bolt passes arguments by name: `next` it must be.
    async def once(self, body: dict[str, Any], context: AsyncBoltContext, next: Next) -> None:
        """The message's row, saved (deduplicated: each event, and each message, once) before
        Bolt acknowledges it (docs/architecture.md): by the intake, as the request's own row,
        or here, for a request that is not (handed back at start-up, or not saved by the
        intake: a database that refuses it here too tells the author, and the error answers
        Slack 500, so Slack delivers the event again later)."""
        saved = context.get(SAVED_ROW)
        if not isinstance(saved, InboxItem):
            saving = await self.of(body, context)
            if saving is None:
                return
            saved = await self.service.take_message(*saving)
        if saved is not None:
            context[SAVED_ROW] = saved
            await next()

    async def incoming(self, context: AsyncBoltContext) -> None:
        saved: InboxItem = context[SAVED_ROW]
        self.service.process_soon(saved)


async def other_event() -> None:
    """Answer every other event with 200 (ignored ones too), so Slack never disables the app:
    the catch-all, registered after every other event listener."""


# -- Slack's AI-app container ------------------------------------------------------------------
# The agent's place in Slack: a conversation opened there is offered the policy's suggested
# prompts, and each change of the channel the user looks at is recorded, so that the next run
# there gets that channel's instructions and tools (`bot.runs.context`). Messages there are
# DMs: `Messages` above takes them like any other, and they are sessions like any thread.
#
# Both of Slack's experiences are handled:
#
# - the agent messaging experience (`features.agent_view` in the manifest, the only one new
#   apps can use): the user opening the app's Messages tab is `app_home_opened` with `tab:
#   "messages"`, and what they look at is `app_context_changed` (ordered `context.entities`),
#   for the DM as a whole (each message there starts its own thread);
# - the older assistant experience (`assistant_view`): `assistant_thread_started` and
#   `assistant_thread_context_changed`, for one thread of the split view.


assistant_logger = logging.getLogger("opsgate.slack.assistant")


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
            assistant_logger.warning("app_home_opened (messages) without its channel; ignored")
            return
        await self.output.replies.suggest_prompts(dm, self.service.suggested_prompts())

    async def app_context(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        dm = _whole_dm(event, body)
        if dm is None:
            assistant_logger.warning("app_context_changed without its channel; ignored")
            return
        await self.service.viewing(dm, viewed_channel(event.get("context")))

    async def started(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        found = _thread_of(event, body)
        if found is None:
            assistant_logger.warning("assistant_thread_started without its thread; ignored")
            return
        thread, viewing = found
        prompts = await self.service.thread_started(thread, viewing)
        await self.output.replies.suggest_prompts(thread, prompts)

    async def context_changed(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        found = _thread_of(event, body)
        if found is not None:
            await self.service.viewing(*found)
