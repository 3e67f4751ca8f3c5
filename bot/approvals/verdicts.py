"""The typed answer of every authorisation rule: `Allowed` or `Refused`, never a message.

Front ends (Slack, the terminal) render a `Refused` to words; the run service audits `rule`
and acts on the kind. See `docs/architecture.md`, "Approval semantics".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Action", "Allowed", "RefusalReason", "Refused", "Verdict", "Who"]

Action = Literal["approve", "reject", "cancel", "withdraw", "feedback", "break_glass"]
"""What someone tried: decide a card (approve/reject), cancel a run, withdraw a queued message,
give feedback on an answer, break glass on a card a change freeze blocks."""

RefusalReason = Literal[
    "unknown_workspace",
    "self_approval",
    "other_workspace",
    "not_an_approver",
    "groups_unavailable",
    "card_locked",
    "frozen",
    "not_breakable",
    "own_break_glass",
]
"""Why not. `unknown_workspace`: the request did not say which workspace the person belongs to,
so the Slack Connect rule cannot be applied (refused, whatever else holds).
`groups_unavailable`: the person is not listed and a user group that might hold
them could not be looked up (try again later). `card_locked`: the call's arguments could not be
shown whole, or the policy forbids it, so nothing may approve it (`bot.approvals.gate`).
`frozen`: a change freeze is in force (`rule` names it and until when); `not_breakable`: no
"Break glass" here (no freeze, or neither the tool nor the rule sets `break_glass`);
`own_break_glass`: the breaker may not mark their own break-glass use reviewed."""


@dataclass(frozen=True, slots=True)
class Who:
    """Who may act where the refusal happened, for the front end to name them."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    requester: str | None = None
    """The requester, when the action is one the requester may always take (reject, cancel)."""

    @property
    def anyone(self) -> bool:
        return not self.users and not self.groups


@dataclass(frozen=True, slots=True)
class Allowed:
    """The action may go ahead; `rule` (for the audit log) says which rule allowed it."""

    rule: str
    counts: tuple[str, ...] = ()
    """An approval's requirements it counts toward (`Requirement.key`s: the rules that name
    this person), when the call has requirements; the store counts it toward those only."""
    kind: Literal["allowed"] = "allowed"


@dataclass(frozen=True, slots=True)
class Refused:
    """The action may not go ahead, and why, with what a front end needs to explain it."""

    reason: RefusalReason
    action: Action
    rule: str
    who: Who = Who()
    unresolved_groups: tuple[str, ...] = ()
    """User groups whose members could not be looked up (with `groups_unavailable`)."""
    kind: Literal["refused"] = "refused"


Verdict = Allowed | Refused
