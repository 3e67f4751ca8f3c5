"""Button clicks on approval cards (Approve, Reject, Cancel run). Every click is acknowledged
before any slow work; what the clicker alone should know comes back as a notice."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp

from ...runs.notices import Notice
from ...runs.output import PostFailed, Thread
from ...runs.service import RunService
from .._binding import shown_digest
from .._text import escape_mrkdwn
from ..blocks import ACTION_APPROVE, ACTION_CANCEL, ACTION_REJECT
from ..output import SlackThreadOutput
from ._homes import republish
from ._unsaved import click_saved

__all__ = ["PRE_CHECK_SECONDS", "register"]

PRE_CHECK_SECONDS = 1.0
"""How long a Reject click waits for the approvals check before opening the form anyway: the
form needs the click's `trigger_id`, which Slack honours for 3 seconds only."""


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    async def tell(click: Click, notice: Notice | None) -> None:
        if notice is None:
            return
        # A click on the Home tab has no thread: answer in the card's.
        thread = click.thread or await service.decisions.thread_of_call(click.ledger_id)
        if thread is not None:
            await output.tell(thread, click.user, notice)

    def saved(click: Click) -> AbstractAsyncContextManager[None]:
        return click_saved(
            service, output, user=click.user, ledger_id=click.ledger_id, thread=click.thread
        )

    @app.action(ACTION_APPROVE)
    async def on_approve(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        async with saved(click):
            await tell(
                click,
                await service.decide(
                    click.ledger_id,
                    "approved",
                    user=click.user,
                    team=click.team,
                    digest=click.digest,
                ),
            )
        await republish(
            service,
            output,
            clicker=click.user,
            team=click.team,
            ledger_id=click.ledger_id,
            clicker_tab=click.thread is None,  # a card in a channel: only if they opened it
        )

    @app.action(ACTION_REJECT)
    async def on_reject(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        # A slow user-group lookup must not eat the trigger_id: if the check is not done in
        # time the form opens anyway, and submitting it checks again.
        check = service.decisions.check_reject(click.ledger_id, user=click.user, team=click.team)
        try:
            refusal = await asyncio.wait_for(check, PRE_CHECK_SECONDS)
        except TimeoutError:
            refusal = None
        if refusal is not None:
            await tell(click, refusal)
            return
        reasons = service.ctx.policy.reject_reasons
        failed = await output.open_reject_form(click.trigger_id, click.ledger_id, reasons)
        if isinstance(failed, PostFailed) and click.thread is not None:
            await output.tell_mrkdwn(
                click.thread,
                click.user,
                f"I couldn't open the rejection form ({escape_mrkdwn(failed.error)}); "
                "click Reject again.",
            )

    @app.action(ACTION_CANCEL)
    async def on_cancel(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        async with saved(click):
            notice = await service.cancel_from_card(
                click.ledger_id, user=click.user, team=click.team
            )
            await tell(click, notice)


@dataclass(frozen=True, slots=True)
class Click:
    """A button click, as far as the run service cares."""

    ledger_id: str
    """The button's value: the only thing a card's buttons carry."""
    user: str
    team: str | None
    """The clicker's workspace (not the channel's, in a Slack Connect channel)."""
    thread: Thread | None
    """The card's thread, for a private answer; None if the payload does not say."""
    trigger_id: str
    digest: str | None = None
    """The digest the clicked card showed (its buttons' block id); None if it does not say."""


def click_of(body: dict[str, Any]) -> Click:
    user = body.get("user") or {}
    team = user.get("team_id") or (body.get("team") or {}).get("id")
    container = body.get("container") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
    if container.get("type") == "view":  # the Home tab: no channel, no thread
        channel = None
    message = body.get("message") or {}
    thread_ts = message.get("thread_ts") or message.get("ts")
    thread = Thread(str(team or ""), str(channel), str(thread_ts)) if channel else None
    return Click(
        ledger_id=str(body["actions"][0].get("value") or ""),
        user=str(user.get("id")),
        team=str(team) if team else None,
        thread=thread,
        trigger_id=str(body.get("trigger_id") or ""),
        digest=shown_digest(body["actions"][0].get("block_id")),
    )
