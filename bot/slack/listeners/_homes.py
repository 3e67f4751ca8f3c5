"""Republishing Home tabs after a decision: the clicker's, and those of the people who opened
theirs lately and see the change (the call's requester, its channel's approvers)."""

from __future__ import annotations

from ...runs.service import RunService
from ..output import SlackThreadOutput

__all__ = ["republish"]


async def republish(
    service: RunService,
    output: SlackThreadOutput,
    *,
    clicker: str,
    team: str | None,
    ledger_id: str | None = None,
    channel: str | None = None,
) -> None:
    """After a decision on call `ledger_id` (or a change to `channel`'s allowances)."""
    people: dict[str, str | None] = {clicker: team}
    for viewer in await service.home.affected(ledger_id=ledger_id, channel=channel):
        people.setdefault(viewer.user_id, viewer.team_id)
    for user, their_team in people.items():
        await output.publish_home(await service.home.view(user, team=their_team))
