"""The run service's side of the one gate (`bot.approvals.authorize`): every step that decides,
edits, allows, cancels, withdraws, revokes or shows buttons asks through `authorize_on`, with
the session's workspace and the policy's verdict on the call always given, so no step can
forget a rule.

Delegations (`/opsgate delegate`) are here too: a click the gate refuses as "not an approver"
is asked again as the delegator the clicker stands in for (`acting_for`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..approvals import Actor, GateAction, GatedCall, Refused, Verdict, authorize
from ..policy import GateDecision
from ..store import CardLock, SessionRow, ToolCallRow
from ..words import format_duration, parse_duration
from .cards import call_decision
from .context import RunContext
from .freezes import freeze_for, freeze_words
from .notices import DelegationAnswer, NotAllowed, NotApprovable, Notice

__all__ = [
    "MAX_DELEGATION",
    "OnCall",
    "acting_for",
    "audit_refusal",
    "audit_unknown",
    "authorize_on",
    "call_lock",
    "delegate_command",
    "lapse",
    "on_call",
    "refusal_notice",
]

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


# -- the steps that act on a card's call -------------------------------------------------------
# Decide, reject, edit, allow, re-run a preview, break glass, mark reviewed: each finds the call
# and its session, asks the gate, and audits a refusal the same way; written once here.


@dataclass(frozen=True, slots=True)
class OnCall:
    """A card's call, its session, and the policy's verdict on it."""

    row: ToolCallRow
    session: SessionRow
    decision: GateDecision

    async def authorize(
        self,
        ctx: RunContext,
        action: GateAction,
        *,
        user: str,
        team: str | None,
        no_requester: bool = False,
    ) -> Verdict:
        """`authorize_on` for this call."""
        return await authorize_on(
            ctx,
            action,
            user=user,
            team=team,
            session=self.session,
            row=self.row,
            decision=self.decision,
            no_requester=no_requester,
        )


async def on_call(ctx: RunContext, ledger_id: str) -> OnCall | None:
    """The call of a card's button (its value) and its session; None when either is gone."""
    row = await ctx.store.get_call(ledger_id)
    session = None if row is None else await ctx.store.get_session(row.session_id)
    if row is None or session is None:
        return None
    return OnCall(row, session, call_decision(ctx, row))


async def audit_unknown(ctx: RunContext, ledger_id: str, *, user: str) -> None:
    """A click on a call the store does not know (a forged or very old button)."""
    await ctx.store.audit(
        "refusal",
        actor=user,
        details={
            "reason": "unknown approval id",
            "id": ledger_id,
            "ledger_id": ledger_id,
            "rule": None,
            "policy_rule": None,
        },
    )


async def audit_refusal(
    ctx: RunContext,
    on: OnCall,
    *,
    user: str,
    team: str | None,
    reason: str | None,
    rule: str | None,
    **extra: Any,
) -> None:
    """The `refusal` audit row of a step on `on`'s call: who, why, the rule that refused
    and the policy rule that applied (`extra`: the step's own fields, e.g. `decision`)."""
    row = on.row
    details: dict[str, Any] = {"ledger_id": row.id, **extra, "reason": reason, "rule": rule}
    details |= {"policy_rule": on.decision.policy_rule, "team_id": team}
    await ctx.store.audit(
        "refusal", actor=user, session_id=row.session_id, call_id=row.call_id, details=details
    )


# -- delegations ------------------------------------------------------------------------------
# Delegation while away: `/opsgate delegate @user until <time or duration> [reason]` and
# `/opsgate delegate off`.
#
# While it holds, the delegate may decide wherever the delegator may, as "U2 for U1": the
# approval is the delegator's (so one person is counted once toward a quorum, never both), the
# audit's actor is the delegate with `acting_for` the delegator. A delegate never approves
# their own request, and a delegation never chains (the delegator's own delegations are not
# followed). It ends by itself (`lapse`, from the expiry timer's tick).


MAX_DELEGATION = timedelta(days=90)
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>|([UW][A-Z0-9]{2,})")
USAGE = (
    "Usage: `/opsgate delegate @someone until <2026-12-24T18:00Z or 3d> [reason]`, "
    "or `/opsgate delegate off`."
)


async def delegate_command(ctx: RunContext, user: str, text: str) -> DelegationAnswer:
    """Start or end `user`'s delegation; the answer, in words, for `user` alone."""
    rest = text.strip()
    if rest.lower() == "off":
        ended = await ctx.store.end_delegation(user, "off")
        return _said("Your delegation has ended." if ended else "You have no delegation.")
    parts = rest.split(None, 3)
    found = _MENTION.fullmatch(parts[0]) if parts else None
    if found is None or len(parts) < 3 or parts[1].lower() != "until":
        return _said(USAGE)
    delegate = found[1] or found[2]
    now = ctx.clock()
    until = _until(parts[2], now)
    if delegate == user:
        return _said("You cannot delegate to yourself.")
    if until is None or not now < until <= now + MAX_DELEGATION:
        return _said(f"{parts[2]!r} is not a time within 90 days. " + USAGE)
    reason = parts[3] if len(parts) > 3 else None
    await ctx.store.delegate(user, delegate, until, reason)
    return _said(
        f"<@{delegate}> decides for you until {until:%Y-%m-%d %H:%M} UTC "
        f"({format_duration(until - now, approximate=True)})."
    )


async def acting_for(
    ctx: RunContext, on: OnCall, user: str, team: str | None, action: GateAction
) -> tuple[str, Verdict] | None:
    """The delegator `user` may act for on this call, with the verdict for them; None."""
    if on.row.requested_by == user:
        return None  # a delegate never approves their own request
    for held in await ctx.store.delegations(ctx.clock()):
        if held.delegate != user:
            continue
        verdict = await on.authorize(ctx, action, user=held.delegator, team=team)
        if verdict.kind == "allowed":
            return held.delegator, verdict
    return None


async def lapse(ctx: RunContext) -> int:
    """End the delegations whose time has passed (each once across replicas)."""
    return await ctx.store.end_lapsed_delegations(ctx.clock())


def _until(text: str, now: datetime) -> datetime | None:
    try:
        return now + parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _said(text: str) -> DelegationAnswer:
    return DelegationAnswer(text)
