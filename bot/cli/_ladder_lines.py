"""The lines `opsgate policy explain` adds about what happens when nobody answers: the
reminders, each escalation step, and who is on call now for each on-call name."""

from __future__ import annotations

from datetime import datetime

from ..policy import GateDecision, Policy, ladder_for, oncall_now
from ..words import format_duration

__all__ = ["ladder_lines"]


def ladder_lines(policy: Policy, decision: GateDecision, now: datetime) -> list[str]:
    """`reminders: …`, `escalate N: …` (for a call that waits) and `on call: …` lines."""
    lines: list[str] = []
    if decision.requires_approval and not decision.forbidden:
        ladder = ladder_for(policy, decision)
        if ladder.every is not None:
            every = format_duration(ladder.every)
            lines.append(f"reminders: every {every} to who may still decide, at most {ladder.most}")
        for number, step in enumerate(ladder.steps, start=1):
            quorum = (
                f", quorum {step.required_approvals}" if step.required_approvals is not None else ""
            )
            added = ", ".join(step.approvers)
            lines.append(
                f"escalate {number}: after {format_duration(step.after)} add {added}{quorum}"
            )
    for name, who in oncall_now(policy, now):
        lines.append(f"on call: oncall:{name} = {who or 'nobody'}")
    return lines
