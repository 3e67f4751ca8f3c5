"""A call's requirements as the store counts them and as its card shows them.

When a call's parts match several rules that ask, each rule's approvers and quorum must be met
at once (`GateDecision.needs`); the store decides from its approvals which are
(`bot.store.rules.tally`), and the card lists each rule with who approved toward it and what is
still missing.
"""

from __future__ import annotations

from ..policy import GateDecision, Requirement
from ..store import Quorum, Ruling, ToolCallRow
from ..store.rules import counting
from .context import RunContext
from .views import CardRequirement

__all__ = ["card_requirements", "quorums", "requirement_words", "ruling"]


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
