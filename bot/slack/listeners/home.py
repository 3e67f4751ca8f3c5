"""The Home tab, Revoke (from the Home tab or `/opsgate allowances`), channel membership and
the message shortcut. Each acknowledges first, then makes its one call of the run service; the
Home tab is drawn fresh when opened.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncRespond

from ...runs.clicks import Answer
from ...runs.output import Thread
from ...runs.service import RunService
from ...settings import checkpoint
from ..notices import render as render_notice
from ..output import SlackThreadOutput
from ..payloads import click_of
from .cards import render
from .messages import message_text

__all__ = ["HomeTab"]

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
            await respond(text=render_notice(answer.notice).text, response_type="ephemeral")
            answer = Answer(homes=answer.homes)
        await render(self.output, click.user, answer)

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
