"""Button clicks on approval cards (Approve, Reject, Cancel run). Every click is acknowledged
before any slow work."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ..blocks import ACTION_APPROVE, ACTION_CANCEL, ACTION_REJECT, reject_modal
from ..runner import Runner

__all__ = ["register"]


PRE_CHECK_SECONDS = 1.0


def _clicker(body: dict[str, Any]) -> tuple[str, str | None]:
    user = body.get("user") or {}
    team = user.get("team_id") or (body.get("team") or {}).get("id")
    return str(user.get("id")), team


def _channel(body: dict[str, Any]) -> str | None:
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
        "channel_id"
    )
    return str(channel) if channel else None


async def tell_clicker(
    client: AsyncWebClient, body: dict[str, Any], text: str, *, channel: str | None = None
) -> None:
    """An ephemeral reply: only the person who clicked sees why nothing changed."""
    channel = channel or _channel(body)
    user, _ = _clicker(body)
    if not channel:
        return
    thread_ts = (body.get("message") or {}).get("thread_ts")
    with contextlib.suppress(SlackApiError):
        await client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=thread_ts)


def register(app: AsyncApp, runner: Runner) -> None:
    @app.action(ACTION_APPROVE)
    async def on_approve(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        user, team = _clicker(body)
        ledger_id = str(body["actions"][0].get("value") or "")
        message = await runner.decide(ledger_id, "approved", user=user, team=team)
        if message:
            await tell_clicker(client, body, message)

    @app.action(ACTION_REJECT)
    async def on_reject(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        user, team = _clicker(body)
        ledger_id = str(body["actions"][0].get("value") or "")
        row = await runner.deps.store.get_call(ledger_id)
        if row is None:
            await tell_clicker(client, body, "I don't know this approval request.")
            return
        if row.status != "pending":
            who = f"<@{row.decided_by}>" if row.decided_by else "someone"
            await tell_clicker(client, body, f"This request was already {row.status} by {who}.")
            return
        if user != row.requested_by:
            # The trigger_id lives 3 s: a slow user-group lookup must not eat it. If the check
            # is not done in time the modal opens anyway; submitting it checks again.
            check = runner.check_clicker(row, user=user, channel=_channel(body) or "", team=team)
            try:
                allowed, why, _ = await asyncio.wait_for(check, PRE_CHECK_SECONDS)
            except TimeoutError:
                allowed, why = True, None
            if not allowed:
                await tell_clicker(client, body, why or "You may not decide on this request.")
                return
        try:
            await client.views_open(trigger_id=body["trigger_id"], view=reject_modal(ledger_id))
        except SlackApiError as exc:
            await tell_clicker(
                client,
                body,
                f"I couldn't open the rejection form ({exc.response.get('error')}); "
                "click Reject again.",
            )

    @app.action(ACTION_CANCEL)
    async def on_cancel(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        user, team = _clicker(body)
        ledger_id = str(body["actions"][0].get("value") or "")
        message = await runner.cancel_from_card(ledger_id, user=user, team=team)
        if message:
            await tell_clicker(client, body, message)
