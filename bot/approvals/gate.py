"""`authorize`: the one path every entry point takes to ask "may this person do this here?".

Cards, the Home tab, modals, slash commands and messages all decide, edit, allow, cancel,
withdraw, revoke, show buttons and take feedback through this function, so a rule (the
workspace, Slack Connect, approvers, groups, self-approval, the policy's verdict on the call,
the card lock) is applied the same way whichever
surface the click came from (docs/architecture.md, "One gate"). It is thin on purpose: the
rules live in `Approvals.check`; this adds only what every caller used to do for itself (the
session's workspace always given, the action mapped to its rule, the lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..policy import GateDecision
from .rules import Approvals
from .verdicts import Action, Refused, Verdict

__all__ = ["Actor", "GateAction", "GatedCall", "authorize"]

GateAction = Literal[
    "approve",
    "reject",
    "edit",
    "allow",
    "cancel",
    "withdraw",
    "revoke",
    "show",
    "feedback",
    "preview",
    "break_glass",
    "review",
]
"""What the person tries. `show`: be offered the call's buttons (the Home tab, `pending`);
`feedback`: rate a run's answer; `preview`: run a call's preview again ("Re-run preview");
`break_glass`: approve a call a freeze blocks (break-glass approvers only); `review`: mark
someone else's break-glass use reviewed (an approver)."""

_RULE: dict[GateAction, Action] = {
    "approve": "approve",
    "reject": "reject",
    "edit": "approve",  # an edit approves a new call
    "allow": "approve",  # an allowance approves this call and later ones
    "show": "approve",
    "revoke": "approve",  # anyone who may approve in the channel (or the granter)
    "cancel": "cancel",
    "withdraw": "withdraw",
    "feedback": "feedback",
    "preview": "approve",  # who may approve the call may refresh what they decide on
    "break_glass": "approve",
    "review": "approve",
}
_SHOWS_ARGUMENTS = frozenset({"approve", "edit", "allow", "show"})
"""Actions that approve what the person was shown: refused while it cannot be shown whole."""


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a user id and their workspace (None: the request did not say)."""

    user: str
    team: str | None


@dataclass(frozen=True, slots=True)
class GatedCall:
    """What the action is on: a call (or a run, or an allowance) in `channel`."""

    channel: str
    workspace: str | None
    """The session's workspace; None only where no workspace applies (the terminal)."""
    requester: str | None = None
    locked: str | None = None
    """Why the call cannot be approved from what was shown, if it cannot: its arguments could
    not be shown whole (`card_locked`), or the policy forbids it (`forbidden`)."""
    frozen: str | None = None
    """The change freeze in force for the call, in words (`freezes[0] until …`), if any."""
    broken_by: str | None = None
    """Who broke glass on the call (for `review`: not them)."""


async def authorize(
    approvals: Approvals,
    actor: Actor,
    call: GatedCall,
    action: GateAction,
    *,
    decision: GateDecision | None = None,
) -> Verdict:
    """`Allowed(rule)` or the typed `Refused`: the rules of `approvals`, then the lock.
    `decision`: the policy's verdict on the call (its rule may name its own approvers and
    quorum, or forbid it); None where no call is concerned (a run, an allowance)."""
    rule = _RULE[action]
    if action in ("break_glass", "review"):
        return await _glass(approvals, actor, call, action, decision)
    verdict = await approvals.check(
        rule,
        channel=call.channel,
        user=actor.user,
        requester=call.requester,
        user_team=actor.team,
        home_team=call.workspace,
        decision=decision,
    )
    if verdict.kind == "allowed" and action in _SHOWS_ARGUMENTS and call.locked is not None:
        if call.locked == "forbidden":
            why = "the policy forbids this call"
        else:
            why = f"the arguments could not be shown whole ({call.locked})"
        return Refused("card_locked", rule, why)
    if verdict.kind == "allowed" and action in _SHOWS_ARGUMENTS and call.frozen is not None:
        return Refused("frozen", rule, f"change freeze {call.frozen}")
    return verdict


async def _glass(
    approvals: Approvals,
    actor: Actor,
    call: GatedCall,
    action: GateAction,
    decision: GateDecision | None,
) -> Verdict:
    """Break glass: only on a frozen, breakable, unforbidden call, only by the break-glass
    approvers (never the requester). Review: an approver, never the breaker."""
    if call.workspace is not None and not actor.team:
        return Refused("unknown_workspace", "approve", "the actor's workspace is unknown")
    if action == "review":
        if call.broken_by is None:
            return Refused("not_breakable", "approve", "no break-glass use on this call")
        if actor.user == call.broken_by:
            return Refused("own_break_glass", "approve", "the breaker may not review it")
        return await approvals.check(
            "approve",
            channel=call.channel,
            user=actor.user,
            requester=None,
            user_team=actor.team,
            home_team=call.workspace,
            decision=decision,
        )
    if decision is None or decision.forbidden or not decision.break_glass:
        return Refused("not_breakable", "approve", "the policy sets no break_glass for this call")
    if call.frozen is None:
        return Refused("not_breakable", "approve", "no change freeze is in force")
    if call.locked is not None:
        return Refused("card_locked", "approve", f"the call is locked ({call.locked})")
    return await approvals.check_break_glass(
        channel=call.channel,
        user=actor.user,
        requester=call.requester,
        user_team=actor.team,
        home_team=call.workspace,
        decision=decision,
    )
