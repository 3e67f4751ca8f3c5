"""The Home tab, Revoke (from the Home tab or `/opsgate allowances`) and the message shortcut.
Each acknowledges first, then calls the run service; the Home tab is drawn fresh when opened.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from ...faults import checkpoint
from ...runs.output import Thread
from ...runs.service import RunService
from ..ids import ACTION_REVOKE, SHORTCUT
from ..notices import render
from ..output import SlackThreadOutput
from .cards import click_of, republish
from .messages import message_text

__all__ = ["register"]

logger = logging.getLogger("opsgate.slack.ux")


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    @app.action(ACTION_REVOKE)
    async def on_revoke(ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        await ack()
        click = click_of(body)
        allowance = await service.ctx.store.get_allowance(click.ledger_id)
        notice = await service.allowances.revoke(click.ledger_id, user=click.user, team=click.team)
        # From `/opsgate allowances` (an ephemeral message: no thread), the answer goes to
        # its response_url; from the Home tab, the republished tab is the answer.
        if body.get("response_url"):
            await respond(text=render(notice).text, response_type="ephemeral")
        elif click.thread is not None:
            await output.tell(click.thread, click.user, notice)
        channel = allowance.channel_id if allowance is not None else None
        await republish(service, output, clicker=click.user, team=click.team, channel=channel)

    @app.event("app_home_opened")
    async def on_home_opened(event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home":
            return
        user = str(event.get("user") or "")
        if user:
            team = body.get("team_id")
            await output.replies.publish_home(await service.home.opened(user, team=team))

    @app.event("member_joined_channel")
    @app.event("member_left_channel")
    async def on_membership(event: dict[str, Any]) -> None:
        # Who is in a channel decides whose Home tab lists its calls where anyone approves.
        if channel := str(event.get("channel") or ""):
            service.ctx.approvals.channels.forget(channel)

    @app.shortcut(SHORTCUT)
    async def on_shortcut(ack: AsyncAck, body: dict[str, Any]) -> None:
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
        await service.on_message(thread, user=user, text=message_text(message), message_ts=ts)
