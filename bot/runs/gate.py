"""The run service's side of the one gate (`bot.approvals.authorize`): every step that decides,
edits, allows, cancels, withdraws, revokes or shows buttons asks through `authorize_on`, with
the session's workspace and the policy's verdict on the call always given, so no step can
forget a rule."""

from __future__ import annotations

from ..approvals import Actor, GateAction, GatedCall, Refused, Verdict, authorize
from ..policy import GateDecision
from ..store import CardLock, SessionRow, ToolCallRow
from .cards import call_decision
from .context import RunContext
from .freezes import freeze_for, freeze_words
from .notices import NotAllowed, NotApprovable, Notice

__all__ = ["authorize_on", "call_lock", "refusal_notice"]

_FROZEN_ACTIONS = frozenset({"approve", "edit", "allow", "show", "break_glass"})
"""What a change freeze refuses (all but `break_glass`, which needs one)."""


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
    decision: GateDecision | None = None,
) -> Verdict:
    """May `user` (of workspace `team`) take `action` on `row` (or on `session`'s run)?
    `requester` defaults to the call's, then the session's; `no_requester`: nobody's request
    (an allowance, someone else's Home tab). `decision`: the policy's verdict on the call
    (`call_decision` of `row` when not given), whose rule may name its own approvers and
    quorum, or forbid the call (a lock, as a card that could not show its arguments)."""
    if requester is None and not no_requester:
        requester = row.requested_by if row is not None else session.requester
    if decision is None and row is not None:
        decision = call_decision(ctx, row)
    frozen = broken_by = None
    if row is not None and action in _FROZEN_ACTIONS and row.needs_approval:
        freeze = await freeze_for(ctx, session.channel_id, row.tool)
        frozen = None if freeze is None else freeze_words(freeze)
    if row is not None and action == "review":
        glass = await ctx.store.break_glass_of(row.id)
        broken_by = None if glass is None else glass.broken_by
    call = GatedCall(
        channel=session.channel_id,
        workspace=session.team_id,
        requester=requester,
        locked=call_lock(row, decision),
        frozen=frozen,
        broken_by=broken_by,
    )
    return await authorize(ctx.approvals, Actor(user, team), call, action, decision=decision)


def call_lock(row: ToolCallRow | None, decision: GateDecision | None = None) -> CardLock | None:
    """Why `row` may not be approved from its card, if it may not: the policy forbids it, or
    its arguments could not be shown whole."""
    if decision is not None and decision.forbidden:
        return "forbidden"
    return row.card_locked if row is not None else None


def refusal_notice(
    refusal: Refused, row: ToolCallRow | None = None, decision: GateDecision | None = None
) -> Notice:
    """What to tell the person refused: a locked card says why it has no Approve."""
    lock = call_lock(row, decision)
    if refusal.reason == "card_locked" and lock is not None:
        return NotApprovable(lock)
    return NotAllowed(refusal)
