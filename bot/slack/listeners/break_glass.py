""" "Break glass" on a card a change freeze blocks, its reason modal, and "Mark reviewed" on the
decided card (`bot.runs.break_glass`). Each is acknowledged first and asks the one gate."""

from __future__ import annotations

import asyncio
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp

from ...runs.output import PostFailed
from ...runs.service import RunService
from ..freezes import break_glass_modal, glass_reason
from ..ids import ACTION_BREAK_GLASS, ACTION_REVIEWED, BLOCK_GLASS_REASON, CALLBACK_BREAK_GLASS
from ..output import SlackThreadOutput
from .cards import PRE_CHECK_SECONDS, click_of, click_saved, republish, tell

__all__ = ["register"]


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    desk = service.freezes

    @app.action(ACTION_BREAK_GLASS)
    async def on_break_glass(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        check = desk.check_break_glass(click.ledger_id, user=click.user, team=click.team)
        try:
            refusal = await asyncio.wait_for(check, PRE_CHECK_SECONDS)
        except TimeoutError:
            refusal = None  # submitting the form checks again
        if refusal is not None:
            await tell(service, output, click, refusal)
            return
        view = break_glass_modal(click.ledger_id, click.digest)
        failed = await output.replies.open_view(click.trigger_id, view)
        if isinstance(failed, PostFailed) and click.thread is not None:
            await output.replies.tell_mrkdwn(
                click.thread, click.user, "I couldn't open the break-glass form; click again."
            )

    @app.view(CALLBACK_BREAK_GLASS)
    async def on_break_glass_submitted(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        ledger_id, digest, reason = glass_reason(view)
        if not reason:
            await ack(response_action="errors", errors={BLOCK_GLASS_REASON: "A reason is needed."})
            return
        await ack()
        user = body.get("user") or {}
        user_id, team = str(user.get("id")), user.get("team_id")
        async with click_saved(service, output, user=user_id, ledger_id=ledger_id, thread=None):
            notice = await desk.break_glass(
                ledger_id, user=user_id, team=team, reason=reason, digest=digest
            )
            if notice is not None and (thread := await service.decisions.thread_of_call(ledger_id)):
                await output.tell(thread, user_id, notice)
        await republish(service, output, clicker=user_id, team=team, ledger_id=ledger_id)

    @app.action(ACTION_REVIEWED)
    async def on_reviewed(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        async with click_saved(
            service, output, user=click.user, ledger_id=click.ledger_id, thread=click.thread
        ):
            notice = await desk.review(click.ledger_id, user=click.user, team=click.team)
            await tell(service, output, click, notice)
        await republish(
            service, output, clicker=click.user, team=click.team, ledger_id=click.ledger_id
        )
