"""Republishing Home tabs after a decision: the clicker's, and those of the people who opened
theirs lately and see the change (the call's requester, its channel's approvers).

Only tabs somebody has seen are republished: a person who never opened the Home tab (or not
lately) gets theirs drawn fresh when they open it (`app_home_opened`), so publishing it on every
click would only cost a `views.publish` and the queries behind it, on the event loop that
acknowledges the next clicks (docs/architecture.md, "Home tab")."""

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
    clicker_tab: bool = True,
) -> None:
    """After a decision on call `ledger_id` (or a change to `channel`'s allowances).

    `clicker_tab`: the clicker's own tab is republished even if the store does not list them
    as a recent opener (the click came from the Home tab, or from where it does not say)."""
    viewers = await service.ctx.store.home_viewers()
    people: dict[str, str | None] = {}
    if clicker_tab or any(viewer.user_id == clicker for viewer in viewers):
        people[clicker] = team
    if viewers:
        affected = await service.home.affected(
            ledger_id=ledger_id, channel=channel, viewers=viewers
        )
        for viewer in affected:
            people.setdefault(viewer.user_id, viewer.team_id)
    for user, their_team in people.items():
        await output.publish_home(await service.home.view(user, team=their_team))
