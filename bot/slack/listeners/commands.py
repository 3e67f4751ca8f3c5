"""The `/opsgate` slash command: acknowledged at once, answered privately (or with a thread).

`/opsgate <request>` starts a run in the channel, `/opsgate pending` lists the approvals the
caller may decide, `/opsgate allowances` lists the channel's active allowances (with Revoke),
`/opsgate help` (or nothing) explains usage and the channel's policy.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from ...runs.output import Notice
from ...runs.service import RunService
from ...runs.ux import AllowanceList
from ..output import SlackThreadOutput

__all__ = ["COMMAND", "register"]

COMMAND = "/opsgate"
"""As declared in manifest.yml."""
_HELP_WORDS = frozenset({"", "help", "?", "-h", "--help"})
_CANCEL_HINT = (
    "To cancel a run that waits for approval, write `cancel` in its thread or click "
    "*Cancel run* on one of its cards."
)


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    @app.command(COMMAND)
    async def on_command(ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond) -> None:
        await ack()
        text = str(command.get("text") or "").strip()
        word = text.lower()
        channel = str(command.get("channel_id") or "")
        user = str(command.get("user_id") or "")
        team = str(command.get("team_id") or "")
        hook = respond if command.get("response_url") else None

        async def answer(notice: Notice) -> None:
            await output.answer_command(hook, channel=channel, user=user, notice=notice)

        if word in _HELP_WORDS:
            await answer(service.help_for(channel))
        elif word == "allowances":
            entries = tuple(await service.allowances.active(channel))
            await output.answer_allowances(
                hook, channel=channel, user=user, notice=AllowanceList(channel, entries)
            )
        elif word == "pending":
            await answer(await service.pending_for(user, channel=channel, team=team))
        elif word == "cancel":
            await output.answer_command_mrkdwn(hook, channel=channel, user=user, text=_CANCEL_HINT)
        elif refusal := await service.slash_request(
            team=team, channel=channel, user=user, text=text
        ):
            await answer(refusal)
