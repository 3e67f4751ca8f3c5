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
]
"""What the person tries. `show`: be offered the call's buttons (the Home tab, `pending`);
`feedback`: rate a run's answer; `preview`: run a call's preview again ("Re-run preview")."""

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
    return verdict
