"""When nobody answers: reminders and the escalation ladder of a waiting call, under the whole
policy.

`escalate` (on `[defaults]` or a rule) lists steps, each `after` a time measured from the
card's posting: the step's `approvers` join the call's (the set only grows) and its
`required_approvals`, if given, becomes the quorum (never above the rule's). On-call entries are
resolved at the moment asked (`_oncall`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ._gate import GateDecision, Requirement
from ._oncall import EscalationStep, grown, resolve
from ._policy import Policy
from ._rules import Rule

__all__ = ["Ladder", "added_by", "escalated", "ladder_for", "ladder_tick", "oncall_now"]

_RULE_NAME = re.compile(r"tools\.(.+)\.rules\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class Ladder:
    """What applies to one waiting call when nobody answers: its escalation steps and its
    reminders (`every` None: none)."""

    steps: tuple[EscalationStep, ...]
    every: timedelta | None
    most: int


def _rule_of(policy: Policy, name: str | None) -> Rule | None:
    found = _RULE_NAME.fullmatch(name or "")
    if found is None:
        return None
    section = policy.tools.get(found[1])
    index = int(found[2])
    return section.rules[index] if section is not None and index < len(section.rules) else None


def ladder_for(policy: Policy, decision: GateDecision) -> Ladder:
    """The deciding rule's `escalate` / `remind_every` / `remind_max`, else the defaults'."""
    rule = _rule_of(policy, decision.policy_rule)
    defaults = policy.defaults
    steps = rule.escalate if rule is not None and rule.escalate is not None else defaults.escalate
    every = rule.remind_every if rule is not None and rule.remind_every else defaults.remind_every
    most = rule.remind_max if rule is not None and rule.remind_max else defaults.remind_max
    return Ladder(steps, every, most)


def escalated(
    policy: Policy,
    channel: str | None,
    decision: GateDecision,
    step: int,
    now: datetime | None = None,
) -> GateDecision:
    """`decision` after the first `step` steps of its ladder: each requirement's approvers
    grown by theirs, its quorum the last step's that sets one (never above its own); with
    on-call names in the file, every `oncall:<name>` resolved at `now`, so whoever asks the
    decision later (a click) sees who is on call then. Step 0 without on-call names, or a
    call nothing may approve, is `decision` itself."""
    needs = decision.needs()
    if (step <= 0 and not policy.oncall) or not needs:
        return decision
    passed = ladder_for(policy, decision).steps[: max(step, 0)]
    added = resolve([a for s in passed for a in s.approvers], policy.oncall, now, policy.paged)
    quorum = next((s.required_approvals for s in reversed(passed) if s.required_approvals), None)
    grown_needs: list[Requirement] = []
    for need in needs:
        under = decision.under(need)
        spec = policy.approvers_for(channel, under, now)
        base = (*spec.users, *spec.groups)
        own = policy.required_approvals_for(channel, under)
        if not base:  # anyone in the channel: stays so, only the quorum may change
            grown_needs.append(replace(need, required_approvals=min(own, quorum or own)))
            continue
        grown_needs.append(
            replace(
                need,
                approvers=grown(base, added),
                required_approvals=min(own, quorum) if quorum is not None else own,
            )
        )
    first = grown_needs[0]
    return replace(
        decision,
        approvers=first.approvers,
        required_approvals=first.required_approvals,
        requirements=tuple(grown_needs) if decision.requirements else (),
    )


def added_by(policy: Policy, decision: GateDecision, step: int, now: datetime) -> tuple[str, ...]:
    """Who step number `step` (1-based) adds, resolved at `now`."""
    steps = ladder_for(policy, decision).steps
    if not 0 < step <= len(steps):
        return ()
    return resolve(steps[step - 1].approvers, policy.oncall, now, policy.paged)


def ladder_tick(policy: Policy, longest: float) -> float:
    """How often the expiry timer must look at waiting calls for their steps and reminders to
    come on time: a tenth of the shortest such time in the file (at least 0.2 s), or `longest`
    without any."""
    spans = [s.after for s in policy.defaults.escalate]
    spans += [policy.defaults.remind_every] if policy.defaults.remind_every else []
    for section in policy.tools.values():
        for rule in section.rules:
            spans += [s.after for s in rule.escalate or ()]
            spans += [rule.remind_every] if rule.remind_every else []
    if not spans:
        return longest
    return min(longest, max(0.2, min(spans).total_seconds() / 10))


def oncall_now(policy: Policy, now: datetime) -> tuple[tuple[str, str | None], ...]:
    """Each `[oncall.<name>]` of the file and who is on call for it at `now` (None: nobody)."""
    return tuple(
        (name, spec.who(now, policy.paged)) for name, spec in sorted(policy.oncall.items())
    )
