"""The run service's side of the one gate (`bot.approvals`): every step that decides,
edits, allows, cancels, withdraws, revokes or shows buttons asks through `authorize_on`, with
the session's workspace and the policy's verdict on the call always given, so no step can
forget a rule. That verdict (`call_decision`: the policy on the call as it would run now, its
ladder's steps passed) and the call's requirements (each rule's approvers and quorum, as the
store counts them and the card lists them) are the gate's answer, so they are here.

Delegations (`/opsgate delegate`) are here too: a click the gate refuses as "not an approver"
is asked again as the delegator the clicker stands in for (`acting_for`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agent_core import ToolCall

from ..approvals import Actor, GateAction, GatedCall, Refused, Verdict, authorize
from ..policy import GateDecision, Requirement, escalated
from ..store import CardLock, Quorum, Ruling, SessionRow, ToolCallRow
from ..store.rules import counting
from ..words import format_duration, parse_duration
from .context import RunContext
from .freezes import freeze_for, freeze_words
from .notices import DelegationAnswer, NotAllowed, NotApprovable, Notice
from .views import CardRequirement

__all__ = [
    "MAX_DELEGATION",
    "OnCall",
    "acting_for",
    "audit_refusal",
    "audit_unknown",
    "authorize_on",
    "call_decision",
    "call_lock",
    "card_requirements",
    "delegate_command",
    "lapse",
    "on_call",
    "quorums",
    "refusal_notice",
    "requirement_words",
    "ruling",
]

_FROZEN_ACTIONS = frozenset({"approve", "edit", "allow", "show", "break_glass"})
"""What a change freeze refuses (all but `break_glass`, which needs one)."""


def call_decision(ctx: RunContext, row: ToolCallRow) -> GateDecision:
    """What the policy says of the call as it would run now (edited arguments included)."""
    shown = row.running_arguments()
    arguments = (row.edited_arguments or row.arguments) if isinstance(shown, dict) else str(shown)
    call = ToolCall(id=row.call_id, name=row.tool, arguments=arguments)
    tool = ctx.tools.get(row.tool)
    decision = ctx.policy.decide(tool if tool is not None else row.tool, call)
    # The steps of its escalation ladder passed so far widen who may decide, at every click.
    return escalated(ctx.policy, row.card_channel, decision, row.escalation_step, ctx.clock())


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


# -- a call's requirements --------------------------------------------------------------------
# A call's requirements as the store counts them and as its card shows them.
#
# When a call's parts match several rules that ask, each rule's approvers and quorum must be met
# at once (`GateDecision.needs`); the store decides from its approvals which are
# (`bot.store.rules.tally`), and the card lists each rule with who approved toward it and what is
# still missing.


def quorums(ctx: RunContext, channel: str | None, decision: GateDecision) -> tuple[Quorum, ...]:
    """Every requirement of the call as the store counts it: each rule's key, words and
    quorum (the rule's, else the channel's, else the defaults')."""
    return tuple(
        Quorum(
            key=need.key,
            label=requirement_words(need),
            needed=ctx.policy.required_approvals_for(channel, decision.under(need)),
        )
        for need in decision.needs()
    )


def ruling(
    ctx: RunContext, channel: str | None, decision: GateDecision, rule: str | None
) -> Ruling:
    """What the policy ruled for a decision on the call, as the store records and counts it:
    who may decide (`rule`, the verdict's), the rule that gated the call and what it matches,
    and every requirement at once with its quorum."""
    return Ruling(
        rule=rule,
        policy_rule=decision.policy_rule,
        policy_match=decision.rule_label,
        required_approvals=ctx.policy.required_approvals_for(channel, decision),
        requirements=quorums(ctx, channel, decision),
    )


def requirement_words(need: Requirement) -> str:
    """A requirement in words: its rule and what it matches, or the channel's approvers."""
    if need.policy_rule is None:
        return "the channel's approvers"
    return f"{need.policy_rule} ({need.rule_label})" if need.rule_label else need.policy_rule


def card_requirements(
    ctx: RunContext, row: ToolCallRow, channel: str, decision: GateDecision
) -> tuple[CardRequirement, ...]:
    """Each rule that must approve and who has toward it; empty when one rule decides."""
    needs = decision.needs()
    if len(needs) < 2:
        return ()
    state = row.quorum_state()
    counts = {} if state is None else state.counts
    shown: list[CardRequirement] = []
    counted = counting(quorums(ctx, channel, decision), row.approvals, counts)
    for need, (quorum, approved_by) in zip(needs, counted, strict=True):
        spec = ctx.policy.approvers_for(channel, decision.under(need))
        shown.append(
            CardRequirement(quorum.label, quorum.needed, approved_by, spec.users, spec.groups)
        )
    return tuple(shown)
