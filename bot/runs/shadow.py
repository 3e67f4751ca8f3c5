"""The shadow policy: every live call judged a second time, by a policy that is not acted on.

`OPSGATE_SHADOW_POLICY` (or `[shadow] policy` in the policy file) names it; it is read once at
start-up like the live one (a file that does not load stops start-up, naming the key). Where
the live gate judges a call (`bot.runs.edits`), `judge_in_shadow` asks the shadow policy's own
`decide` too and compares the two verdicts in the call's channel (`bot.policy.compare_verdicts`:
rule, verdict, approvers, quorum; not freezes or allowances, which are the same for both). A
difference is counted (`opsgate_shadow_differences_total{direction,rule}`) and audited
(`shadow_differs`); nothing else happens, and a failure here is logged, never raised into the
live decision.
"""

from __future__ import annotations

import logging
from pathlib import Path

from agent_core import Tool, ToolCall

from ..policy import GateDecision, Policy, call_verdict, compare_verdicts
from .context import RunContext

__all__ = ["judge_in_shadow", "load_shadow"]

logger = logging.getLogger("opsgate.runs")


def load_shadow(configured: Path | None, policy: Policy) -> Policy | None:
    """The shadow policy `configured` (the setting) or the policy's `[shadow] policy` names;
    None when neither does."""
    path = configured or policy.shadow_path
    if path is None:
        return None
    shadow = Policy.load(path)
    logger.warning(
        "shadow policy %s: every call is also judged by it, not acted on; differences are "
        "counted (opsgate_shadow_differences_total) and audited (shadow_differs)",
        path,
    )
    return shadow


async def judge_in_shadow(
    ctx: RunContext,
    tool: Tool,
    call: ToolCall,
    live: GateDecision,
    *,
    channel: str,
    session_id: str,
) -> None:
    """Judge `call` by the shadow policy too; count and audit a difference (see the module)."""
    shadow = ctx.shadow
    if shadow is None:
        return
    try:
        other = shadow.decide(tool, call)
        before = call_verdict(ctx.policy, live, channel)
        after = call_verdict(shadow, other, channel)
        direction = compare_verdicts(before, after)
        if direction is None:
            return
        deciding = live if direction == "looser" else other
        ctx.observer.shadow_differs(direction, deciding.policy_rule or "none")
        await ctx.store.audit(
            "shadow_differs",
            actor=None,
            session_id=session_id,
            call_id=call.id,
            details={
                "tool": call.name,
                "direction": direction,
                "live": before.as_json(),
                "shadow": after.as_json(),
                "shadow_policy": shadow.source,
            },
        )
    except Exception:  # the shadow never changes the live decision, even by failing
        logger.exception("shadow policy: judging call %r failed", call.id)
