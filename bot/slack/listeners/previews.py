"""The "Re-run preview" button of an approval card: the call's preview is run again
and the card redrawn with it; who may click is who may approve the call (`authorize()`, action
`preview`, in `bot/runs/previews.py`)."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp

from ...runs.service import RunService
from ..ids import ACTION_RERUN_PREVIEW
from ..output import SlackThreadOutput
from .cards import click_of, click_saved, tell

__all__ = ["register"]


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    @app.action(ACTION_RERUN_PREVIEW)
    async def on_rerun_preview(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        async with click_saved(
            service, output, user=click.user, ledger_id=click.ledger_id, thread=click.thread
        ):
            notice = await service.decisions.previews.rerun(
                click.ledger_id, user=click.user, team=click.team
            )
            await tell(service, output, click, notice)
