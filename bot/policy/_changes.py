"""What a call gets under a policy, as one comparable value, and whether another is looser.

`policy replay` and the shadow policy both compare two policies' verdicts on one call: a
`CallVerdict` is the verdict (`free`, `allowance`, `approval`, `frozen`, `forbidden`), the
deciding rule, who may approve and how many must. Looser is what lets a call through with less
human judgement: a card no longer needed, fewer approvals, approvers not all among the old
ones, or a forbidden call allowed; tighter the reverse. A change in any way looser counts as
looser, even when it is tighter in another (the reviewer must see it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._gate import GateDecision
from ._policy import Policy

__all__ = ["ANYONE", "CallVerdict", "Direction", "call_verdict", "compare_verdicts"]

Verdict = Literal["free", "allowance", "approval", "frozen", "forbidden"]
Direction = Literal["looser", "tighter"]

ANYONE = "anyone"
"""The approvers of a channel whose policy names nobody: anyone in it."""

_RANK: dict[Verdict, int] = {"free": 0, "allowance": 1, "approval": 2, "frozen": 3, "forbidden": 4}


@dataclass(frozen=True, slots=True)
class CallVerdict:
    """One call's verdict under one policy (the JSON of `policy replay`'s `before`/`after`)."""

    verdict: Verdict
    rule: str
    """The deciding rule: `tools.<tool>.rules[<i>]`, or the gate's words when no rule did."""
    approvers: tuple[str, ...] = ()
    """Users and groups who may approve (`anyone` when the policy names nobody); empty when
    nobody is asked."""
    required: int = 0

    def as_json(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "rule": self.rule,
            "approvers": list(self.approvers),
            "required": self.required,
        }

    def words(self) -> str:
        """In `policy explain`'s vocabulary."""
        if self.verdict == "forbidden":
            return "forbidden"
        if self.verdict == "free":
            return "runs without approval"
        if self.verdict == "allowance":
            return "covered by an allowance: runs without a card"
        noun = "approval" if self.required == 1 else "approvals"
        frozen = " (frozen: no Approve)" if self.verdict == "frozen" else ""
        return f"needs {self.required} {noun} from {', '.join(self.approvers)}{frozen}"


def call_verdict(
    policy: Policy,
    decision: GateDecision,
    channel: str | None,
    *,
    frozen: bool = False,
    allowance: bool = False,
) -> CallVerdict:
    """`decision` (the policy's `decide`) in `channel` as a `CallVerdict`; `frozen`: a change
    freeze covers the call at its moment; `allowance`: an allowance in force covers it."""
    rule = decision.policy_rule or decision.rule
    if decision.forbidden:
        return CallVerdict("forbidden", rule)
    if not decision.requires_approval:
        return CallVerdict("free", rule)
    if allowance and not frozen:
        return CallVerdict("allowance", rule)
    spec = policy.approvers_for(channel, decision)
    approvers = (ANYONE,) if spec.anyone else (*spec.users, *spec.groups)
    required = policy.required_approvals_for(channel, decision)
    return CallVerdict("frozen" if frozen else "approval", rule, approvers, required)


def compare_verdicts(before: CallVerdict, after: CallVerdict) -> Direction | None:
    """Whether `after` is looser or tighter than `before` for the same call (None: neither)."""
    if _RANK[after.verdict] != _RANK[before.verdict]:
        return "looser" if _RANK[after.verdict] < _RANK[before.verdict] else "tighter"
    if after.verdict not in ("approval", "frozen"):
        return None
    old, new = set(before.approvers), set(after.approvers)
    if after.required < before.required or (new != old and not _within(new, old)):
        return "looser"
    if after.required > before.required or new != old:
        return "tighter"
    return None


def _within(new: set[str], old: set[str]) -> bool:
    """Every approver of `new` could approve under `old` too."""
    return ANYONE in old or new <= old
