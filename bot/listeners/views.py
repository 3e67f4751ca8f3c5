"""Modal submissions: the reason given when rejecting a call."""

from __future__ import annotations

import contextlib
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ..blocks import CALLBACK_REJECT, reason_from_view
from ..runner import Runner

__all__ = ["register"]


def register(app: AsyncApp, runner: Runner) -> None:
    @app.view(CALLBACK_REJECT)
    async def on_reject_submitted(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], client: AsyncWebClient
    ) -> None:
        await ack()
        user = body.get("user") or {}
        ledger_id = str(view.get("private_metadata") or "")
        message = await runner.decide(
            ledger_id,
            "rejected",
            user=str(user.get("id")),
            team=user.get("team_id"),
            reason=reason_from_view(view),
        )
        if message is None:
            return
        row = await runner.deps.store.get_call(ledger_id)
        if row is not None and row.card_channel:
            with contextlib.suppress(SlackApiError):
                await client.chat_postEphemeral(
                    channel=row.card_channel, user=str(user.get("id")), text=message
                )
