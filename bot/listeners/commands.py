"""The `/opsgate` slash command: acknowledged at once, answered privately (or with a thread).

`/opsgate <request>` starts a run in the channel, `/opsgate pending` lists the approvals the
caller may decide, `/opsgate help` (or nothing) explains usage and the channel's policy.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ..runner import Runner

__all__ = ["COMMAND", "register"]

logger = logging.getLogger("opsgate.commands")

COMMAND = "/opsgate"
"""As declared in manifest.yml."""
_HELP_WORDS = frozenset({"", "help", "?", "-h", "--help"})
_CANCEL_HINT = (
    "To cancel a run that waits for approval, write `cancel` in its thread or click "
    "*Cancel run* on one of its cards."
)


async def _answer(
    respond: AsyncRespond, client: AsyncWebClient, command: dict[str, Any], text: str
) -> None:
    """An ephemeral answer: through the command's response_url, else chat.postEphemeral."""
    if command.get("response_url"):
        try:
            await respond(text=text, response_type="ephemeral")
            return
        except Exception:  # the hook is gone or refused; fall back to the Web API
            logger.warning("answering %s through response_url failed", COMMAND, exc_info=True)
    with contextlib.suppress(SlackApiError):
        await client.chat_postEphemeral(
            channel=str(command.get("channel_id")), user=str(command.get("user_id")), text=text
        )


def register(app: AsyncApp, runner: Runner) -> None:
    @app.command(COMMAND)
    async def on_command(
        ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond, client: AsyncWebClient
    ) -> None:
        await ack()
        text = str(command.get("text") or "").strip()
        word = text.lower()
        channel = str(command.get("channel_id") or "")
        user = str(command.get("user_id") or "")
        team = str(command.get("team_id") or "")
        if word in _HELP_WORDS:
            await _answer(respond, client, command, runner.help_for(channel))
        elif word == "pending":
            await _answer(
                respond, client, command, await runner.pending_for(user, channel=channel, team=team)
            )
        elif word == "cancel":
            await _answer(respond, client, command, _CANCEL_HINT)
        else:
            refusal = await runner.slash_request(team=team, channel=channel, user=user, text=text)
            if refusal:
                await _answer(respond, client, command, refusal)
