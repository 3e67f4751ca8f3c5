"""The run service's side of the one gate (`bot.approvals.authorize`): every step that decides,
edits, allows, cancels, withdraws, revokes or shows buttons asks through `authorize_on`, with
the session's workspace always given, so no step can forget a rule."""

from __future__ import annotations

from ..approvals import Actor, GateAction, GatedCall, Refused, Verdict, authorize
from ..store import SessionRow, ToolCallRow
from .context import RunContext
from .notices import NotAllowed, NotApprovable, Notice

__all__ = ["authorize_on", "refusal_notice"]


async def authorize_on(
    ctx: RunContext,
    action: GateAction,
    *,
    user: str,
    team: str | None,
    session: SessionRow,
    row: ToolCallRow | None = None,
    requester: str | None = None,
    no_requester: bool = False,
) -> Verdict:
    """May `user` (of workspace `team`) take `action` on `row` (or on `session`'s run)?
    `requester` defaults to the call's, then the session's; `no_requester`: nobody's request
    (an allowance, someone else's Home tab)."""
    if requester is None and not no_requester:
        requester = row.requested_by if row is not None else session.requester
    call = GatedCall(
        channel=session.channel_id,
        workspace=session.team_id,
        requester=requester,
        locked=row.card_locked if row is not None else None,
    )
    return await authorize(ctx.approvals, Actor(user, team), call, action)


def refusal_notice(refusal: Refused, row: ToolCallRow | None = None) -> Notice:
    """What to tell the person refused: a locked card says why it has no Approve."""
    if refusal.reason == "card_locked" and row is not None and row.card_locked is not None:
        return NotApprovable(row.card_locked)
    return NotAllowed(refusal)
