"""Every requirement of a gated call met at once: which approvals count toward which
requirement, and what is still missing.

A call whose parts match several rules that ask carries one `Quorum` per rule (its key, its
words, how many distinct approvers it needs). An approval counts toward the requirements whose
approvers the person belongs to (the one gate, `bot.approvals`, says which), so one approval
never satisfies a part whose rule does not name that person. The decision is made from the
stored approvals in the decision's own transaction (`decisions.decide_in`), so replicas racing
clicks decide once. A call with one requirement counts every approval toward it, as before:
a row written before requirements were stored keeps its single requirement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ONE_APPROVAL",
    "Quorum",
    "QuorumState",
    "Ruling",
    "Shortfall",
    "Tally",
    "counted",
    "counting",
    "shortfalls",
    "tally",
]

_FROZEN = ConfigDict(frozen=True)


class Quorum(BaseModel):
    """One requirement: `needed` distinct approvers of the set that `key` names."""

    model_config = _FROZEN

    key: str
    """The rule's name (`tools.<tool>.rules[<i>]`), or "channel": its approvers are the
    channel's (or the defaults')."""
    label: str = ""
    """The requirement in words, for the card and the audit log."""
    needed: int = Field(ge=1)


class QuorumState(BaseModel):
    """What the ledger keeps with a pending call (`tool_calls.quorum`, JSON): its
    requirements, and for each approver the keys their approval counts toward."""

    model_config = _FROZEN

    needs: tuple[Quorum, ...]
    counts: dict[str, tuple[str, ...]] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ruling:
    """What the policy ruled for a decision on a call, as the store records and counts it:
    `rule`, who may decide (the approvers' rule that let the decider in); `policy_rule`, the
    rule `tools.<tool>.rules[<i>]` that gated the call, and `policy_match`, what it matches
    in words (both on every decision and refusal row); and the requirements to meet at once
    (`requirements`; none: one, of `required_approvals` distinct approvers). Built once where
    the run service consults the policy, so every decision method takes the same value."""

    rule: str | None = None
    policy_rule: str | None = None
    policy_match: str | None = None
    required_approvals: int = 1
    requirements: tuple[Quorum, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "requirements", tuple(self.requirements))
        if self.required_approvals < 1:
            raise ValueError(
                f"required_approvals must be at least 1, not {self.required_approvals!r}"
            )

    @property
    def needs(self) -> tuple[Quorum, ...]:
        """Every requirement of the decision: those given, or one of `required_approvals`."""
        return self.requirements or (Quorum(key="channel", needed=self.required_approvals),)

    def named(self) -> dict[str, str | None]:
        """The rules that applied, as the audit rows name them."""
        rules = (self.rule, self.policy_rule, self.policy_match)
        return dict(zip(("rule", "policy_rule", "policy_match"), rules, strict=True))


ONE_APPROVAL = Ruling()
"""The ruling a decision method assumes when given none: no rule named, one approval."""


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A requirement not met yet: `have` of `needed` approvals toward it."""

    key: str
    label: str
    have: int
    needed: int


def counting(
    needs: Sequence[Quorum],
    approvals: Sequence[str],
    counts: dict[str, tuple[str, ...]],
) -> list[tuple[Quorum, tuple[str, ...]]]:
    """Each requirement with the approvers that count toward it. With one requirement every
    approval counts; with several, an approval counts toward the keys recorded for its
    approver, and one recorded without any (an older row) toward the first requirement only."""
    distinct = tuple(dict.fromkeys(approvals))
    if len(needs) == 1:
        return [(needs[0], distinct)]
    first = (needs[0].key,) if needs else ()
    return [
        (need, tuple(user for user in distinct if need.key in counts.get(user, first)))
        for need in needs
    ]


def counted(
    needs: Sequence[Quorum],
    approvals: Sequence[str],
    counts: dict[str, tuple[str, ...]],
) -> list[tuple[Quorum, int]]:
    """Each requirement with how many of `approvals` count toward it (`counting`)."""
    return [(need, len(users)) for need, users in counting(needs, approvals, counts)]


def shortfalls(
    needs: Sequence[Quorum], approvals: Sequence[str], counts: dict[str, tuple[str, ...]]
) -> tuple[Shortfall, ...]:
    """The requirements `approvals` do not meet yet (empty: the call is approved)."""
    return tuple(
        Shortfall(need.key, need.label, have, need.needed)
        for need, have in counted(needs, approvals, counts)
        if have < need.needed
    )


@dataclass(frozen=True, slots=True)
class Tally:
    """An approval added to a call: the approvals now, what the ledger stores, what is
    missing (empty: approved)."""

    approvals: tuple[str, ...]
    state: QuorumState
    missing: tuple[Shortfall, ...]


def tally(
    stored: QuorumState | None,
    approvals: Sequence[str],
    user: str | None,
    needs: Sequence[Quorum],
    counts_for: Sequence[str] | None,
) -> Tally:
    """`user`'s approval (None: none, e.g. an edit that counts nobody) added to `approvals`
    under `needs` (today's requirements, which replace the stored ones), counting toward
    `counts_for` (None: the first requirement)."""
    counts = dict(stored.counts) if stored is not None else {}
    kept = [a for a in approvals if a != user]
    if user is not None:
        kept.append(user)
        keys = tuple(counts_for) if counts_for is not None else (needs[0].key,)
        counts[user] = tuple(k for k in keys if any(n.key == k for n in needs))
    counts = {u: keys for u, keys in counts.items() if u in kept}
    state = QuorumState(needs=tuple(needs), counts=counts)
    return Tally(tuple(kept), state, shortfalls(needs, kept, counts))
