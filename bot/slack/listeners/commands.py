"""What a person asks of the bot outside a card: the `/opsgate` slash command (acknowledged at
once, answered privately or with a thread), the Home tab, Revoke, channel membership and the
message shortcut.

`/opsgate <request>` starts a run in the channel, `/opsgate pending` lists the approvals the
caller may decide, `/opsgate allowances` lists the channel's active allowances (with Revoke),
`/opsgate help` (or nothing) explains usage and the channel's policy, `/opsgate freeze
<duration> <reason>` and `/opsgate unfreeze` start and end an ad hoc change freeze of the
channel (freeze admins only).

A signed request replayed within Slack's five-minute signature window verifies again, so each
invocation is claimed once in the store by its `trigger_id` (unique per invocation; the
`response_url` where there is none), through the same `first_sighting` as event dedupe: a
replay starts nothing, in this process or another sharing the database.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncBoltContext, AsyncRespond

from ...runs.clicks import Answer
from ...runs.inbox import SlashDelivery
from ...runs.notices import AllowanceList, Notice, NotSaved
from ...runs.output import Thread
from ...runs.service import RunService
from ...settings import checkpoint
from ...store import InboxItem, StoreError
from ..app import SAVED_ROW
from ..ids import COMMAND, click_of
from ..notices import render
from ..output import SlackThreadOutput
from .cards import render as render_answer
from .messages import message_text

__all__ = ["HomeTab", "SlashCommand", "invocation_key", "slash_of"]


_HELP_WORDS = frozenset({"", "help", "?", "-h", "--help"})
_ANSWERED_AT_ONCE = _HELP_WORDS | {"pending", "cancel", "allowances", "who"}
"""Words that only read: everything else is a request, saved before it is acknowledged."""
_FREEZE_WORDS = frozenset({"freeze", "unfreeze", "delegate"})
"""`/opsgate freeze <duration> <reason>`, `/opsgate unfreeze` (freeze admins only) and
`/opsgate delegate …`: answered at once, each invocation once."""
_CANCEL_HINT = (
    "To cancel a run that waits for approval, write `cancel` in its thread or click "
    "*Cancel run* on one of its cards."
)


def invocation_key(command: Mapping[str, Any]) -> str | None:
    """What names one `/opsgate` invocation, for dedupe; None when the request has neither."""
    team = command.get("team_id") or ""
    if trigger := command.get("trigger_id"):
        return f"slash:{team}:trigger:{trigger}"
    if hook := command.get("response_url"):
        return f"slash:{team}:hook:{hook}"
    return None


def slash_of(command: Mapping[str, Any]) -> tuple[SlashDelivery, list[str]] | None:
    """A `/opsgate <request>` (not a word answered at once, not a freeze) as the inbox saves
    it, under its invocation key: the one intake saves it so before the 200 (its one row),
    the listener only when the intake did not."""
    text = str(command.get("text") or "").strip()
    word = text.lower()
    if command.get("command") != COMMAND or word in _ANSWERED_AT_ONCE:
        return None
    if word.split(" ", 1)[0] in _FREEZE_WORDS:
        return None
    delivery = SlashDelivery(
        team=str(command.get("team_id") or ""),
        channel=str(command.get("channel_id") or ""),
        user=str(command.get("user_id") or ""),
        text=text,
    )
    key = invocation_key(command)
    return delivery, [key] if key else []


class SlashCommand:
    """`/opsgate`, whatever follows it."""

    def __init__(self, service: RunService, output: SlackThreadOutput) -> None:
        self.service = service
        self.output = output

    async def command(
        self,
        ack: AsyncAck,
        command: dict[str, Any],
        respond: AsyncRespond,
        context: AsyncBoltContext,
    ) -> None:
        text = str(command.get("text") or "").strip()
        word = text.lower()
        channel = str(command.get("channel_id") or "")
        user = str(command.get("user_id") or "")
        hook = respond if command.get("response_url") else None
        first = word.split(" ", 1)[0]
        if first in _FREEZE_WORDS:
            await ack()
            rest = text[len(first) :].strip()
            key = invocation_key(command)
            notice = await self.service.command(key, first, channel, user=user, text=rest)
            if notice is not None:
                await self.output.replies.answer_command(
                    hook, channel=channel, user=user, notice=notice
                )
            return
        saved = None
        if (saving := slash_of(command)) is not None:
            # A request is saved before the acknowledgement (docs/architecture.md), in the same
            # transaction as its invocation key: a replay within Slack's signature window
            # (here or on another replica) finds the key taken and starts nothing. The one
            # intake saved it so already, unless it was handed back or not saved in time.
            saved = context.get(SAVED_ROW)
            if not isinstance(saved, InboxItem):
                try:
                    saved = await self.service.save(saving[0], saving[1])
                except StoreError:
                    await ack(text=render(NotSaved("message")).text)
                    return
            if saved is None:
                await ack()
                return
        await ack()
        await self._answer(word, command, hook, saved)

    async def _answer(
        self,
        word: str,
        command: dict[str, Any],
        hook: AsyncRespond | None,
        saved: InboxItem | None,
    ) -> None:
        channel = str(command.get("channel_id") or "")
        user = str(command.get("user_id") or "")
        replies = self.output.replies
        notice: Notice | None = None
        if word in _HELP_WORDS:
            notice = await self.service.help_for(channel)
        elif word == "allowances":
            entries = tuple(await self.service.active_allowances(channel))
            await replies.answer_allowances(
                hook, channel=channel, user=user, notice=AllowanceList(channel, entries)
            )
        elif word == "pending":
            team = str(command.get("team_id") or "")
            notice = await self.service.pending_for(user, channel=channel, team=team)
        elif word == "who":
            notice = self.service.on_call_now()
        elif word == "cancel":
            await replies.answer_command_mrkdwn(hook, channel=channel, user=user, text=_CANCEL_HINT)
        elif saved is not None:
            notice = await self.service.process_owned(saved)
        if notice is not None:
            await replies.answer_command(hook, channel=channel, user=user, notice=notice)


# -- the Home tab, Revoke, channel membership and the message shortcut -------------------------
# The Home tab, Revoke (from the Home tab or `/opsgate allowances`), channel membership and
# the message shortcut. Each acknowledges first, then makes its one call of the run service; the
# Home tab is drawn fresh when opened.


logger = logging.getLogger("opsgate.slack.ux")


class HomeTab:
    """The Home tab and what changes it from outside a card."""

    def __init__(self, service: RunService, output: SlackThreadOutput) -> None:
        self.service = service
        self.output = output

    async def revoke(self, ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        await ack()
        click = click_of(body)
        answer = await self.service.revoke(click)
        # From `/opsgate allowances` (an ephemeral message: no thread), the answer goes to
        # its response_url; from the Home tab, the republished tab is the answer.
        if body.get("response_url") and answer.notice is not None:
            await respond(text=render(answer.notice).text, response_type="ephemeral")
            answer = Answer(homes=answer.homes)
        await render_answer(self.output, click.user, answer)

    async def opened(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home":
            return
        user = str(event.get("user") or "")
        if user:
            team = body.get("team_id")
            await self.output.replies.publish_home(await self.service.home_opened(user, team=team))

    async def membership(self, event: dict[str, Any]) -> None:
        # Who is in a channel decides whose Home tab lists its calls where anyone approves.
        if channel := str(event.get("channel") or ""):
            self.service.members_changed(channel)

    async def shortcut(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        await checkpoint("shortcut")  # crash tests: acknowledged (and saved), not yet acted on
        message = body.get("message") or {}
        channel = str((body.get("channel") or {}).get("id") or "")
        team = str((body.get("team") or {}).get("id") or "")
        user = str((body.get("user") or {}).get("id") or "")
        ts = str(message.get("ts") or "")
        if not (channel and user and ts):
            logger.warning("message shortcut without a channel, user or message; ignored")
            return
        thread = Thread(team, channel, str(message.get("thread_ts") or ts))
        await self.service.on_message(thread, user=user, text=message_text(message), message_ts=ts)
