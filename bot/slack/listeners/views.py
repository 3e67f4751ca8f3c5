"""Modal submissions: the reason given when rejecting a call."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp

from ...runs.service import RunService
from ..blocks import CALLBACK_REJECT, reason_from_view
from ..output import SlackThreadOutput
from ._homes import republish
from ._unsaved import click_saved

__all__ = ["register"]


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    @app.view(CALLBACK_REJECT)
    async def on_reject_submitted(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        await ack()
        user = body.get("user") or {}
        user_id = str(user.get("id"))
        ledger_id = str(view.get("private_metadata") or "")
        notice = None
        async with click_saved(service, output, user=user_id, ledger_id=ledger_id, thread=None):
            notice = await service.decide(
                ledger_id,
                "rejected",
                user=user_id,
                team=user.get("team_id"),
                reason=reason_from_view(view),
            )
        if notice is not None and (thread := await service.decisions.thread_of_call(ledger_id)):
            await output.tell(thread, user_id, notice)
        await republish(
            service, output, clicker=user_id, team=user.get("team_id"), ledger_id=ledger_id
        )
