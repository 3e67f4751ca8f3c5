"""Listeners for Edit, "Allow for <duration>" (and its dialog, where the granter chooses a
shape), Revoke, the edit modal, the Home tab and the message shortcut. Each acknowledges first
(the modal's ack carries validation errors), then calls the run service; what only the clicker
should know goes back privately, in the card's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from ...runs.notices import Notice
from ...runs.output import Thread
from ...runs.service import RunService
from ...runs.ux import AllowForm, EditErrors, EditForm
from .._forms import (
    ACTION_ALLOW,
    ACTION_EDIT,
    CALLBACK_ALLOW,
    CALLBACK_EDIT,
    allow_choice,
    edit_values,
)
from ..home import ACTION_REVOKE
from ..messages import render
from ..output import SlackThreadOutput
from ._homes import republish
from ._unsaved import click_saved
from .actions import Click, click_of
from .events import message_text

__all__ = ["SHORTCUT", "register"]

SHORTCUT = "opsgate_ask"
"""The message shortcut's callback id, as declared in manifest.yml."""

logger = logging.getLogger("opsgate.slack.ux")


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    async def tell(click: Click, notice: Notice | None) -> None:
        if notice is None:
            return
        thread = click.thread or await service.decisions.thread_of_call(click.ledger_id)
        if thread is not None:
            await output.tell(thread, click.user, notice)

    @app.action(ACTION_EDIT)
    async def on_edit(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        form = await service.edits.form(click.ledger_id, user=click.user, team=click.team)
        if not isinstance(form, EditForm):
            await tell(click, form)
            return
        failed = await output.open_edit_form(click.trigger_id, form)
        if failed is not None:
            logger.warning("could not open the edit form: %s", failed.error)

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

    _register_allow(app, service, output, tell)
    _register_edit_form(app, service, output)
    _register_home_and_shortcut(app, service, output)


def _register_allow(
    app: AsyncApp,
    service: RunService,
    output: SlackThreadOutput,
    tell: Callable[[Click, Notice | None], Awaitable[None]],
) -> None:
    @app.action(ACTION_ALLOW)
    async def on_allow(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        form = await service.edits.allow_form(click.ledger_id, user=click.user, team=click.team)
        if isinstance(form, AllowForm):  # shapes to choose from: the dialog decides
            failed = await output.open_allow_form(click.trigger_id, form)
            if failed is not None:
                logger.warning("could not open the allow dialog: %s", failed.error)
            return
        if form is not None:
            await tell(click, form)
            return
        async with click_saved(
            service, output, user=click.user, ledger_id=click.ledger_id, thread=click.thread
        ):
            notice = await service.edits.allow(
                click.ledger_id, user=click.user, team=click.team, digest=click.digest
            )
            await tell(click, notice)
        await republish(
            service,
            output,
            clicker=click.user,
            team=click.team,
            ledger_id=click.ledger_id,
            clicker_tab=click.thread is None,  # a card in a channel: only if they opened it
        )

    @app.view(CALLBACK_ALLOW)
    async def on_allow_submitted(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        user = body.get("user") or {}
        user_id, team = str(user.get("id")), user.get("team_id")
        ledger_id, digest, choice = allow_choice(view)
        async with click_saved(service, output, user=user_id, ledger_id=ledger_id, thread=None):
            notice = await service.edits.allow(
                ledger_id, user=user_id, team=team, digest=digest, choice=choice
            )
            if notice is not None:
                thread = await service.decisions.thread_of_call(ledger_id)
                if thread is not None:
                    await output.tell(thread, user_id, notice)
        await republish(service, output, clicker=user_id, team=team, ledger_id=ledger_id)


def _register_edit_form(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    @app.view(CALLBACK_EDIT)
    async def on_edit_submitted(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        user = body.get("user") or {}
        user_id, team = str(user.get("id")), user.get("team_id")
        ledger_id = str(view.get("private_metadata") or "")
        result: Notice | EditErrors | None = None
        # Acknowledged whatever happens: a modal left without its ack shows Slack's error.
        async with click_saved(service, output, user=user_id, ledger_id=ledger_id, thread=None):
            result = await service.edits.submit(
                ledger_id, edit_values(view), user=user_id, team=team
            )
        if isinstance(result, EditErrors):
            await ack(response_action="errors", errors=result.errors)
            return
        await ack()
        if result is not None:
            thread = await service.decisions.thread_of_call(ledger_id)
            if thread is not None:
                await output.tell(thread, user_id, result)
        await republish(service, output, clicker=user_id, team=team, ledger_id=ledger_id)


def _register_home_and_shortcut(
    app: AsyncApp, service: RunService, output: SlackThreadOutput
) -> None:
    @app.event("app_home_opened")
    async def on_home_opened(event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home":
            return
        user = str(event.get("user") or "")
        if user:
            team = body.get("team_id")
            await output.publish_home(await service.home.opened(user, team=team))

    @app.shortcut(SHORTCUT)
    async def on_shortcut(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
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
