"""The policy's verdict on a stored call, and the audit row that says which rule gated it.

The store audits the request itself ("request"); the rule comes from the policy, which the
store does not know, so the run service adds it when it posts the call's card. The verdict
(`GateDecision`) is worked out again from the stored call wherever it is needed (card,
approvals, allowances): it depends only on the policy and the arguments that would run.
"""

from __future__ import annotations

from agent_core import ToolCall

from ..policy import GateDecision
from ..store import ToolCallRow
from ._context import RunContext

__all__ = ["audit_gate_rule", "call_decision", "forbidden_reason"]


def call_decision(ctx: RunContext, row: ToolCallRow) -> GateDecision:
    """What the policy says of the call as it would run now (edited arguments included)."""
    shown = row.running_arguments()
    arguments = (row.edited_arguments or row.arguments) if isinstance(shown, dict) else str(shown)
    call = ToolCall(id=row.call_id, name=row.tool, arguments=arguments)
    tool = ctx.tools.get(row.tool)
    return ctx.policy.decide(tool if tool is not None else row.tool, call)


def forbidden_reason(decision: GateDecision) -> str:
    """What the model (and the card) is told of a forbidden call: the rule and its reason."""
    where = decision.policy_rule or decision.rule
    why = decision.justification or "the policy forbids this call"
    return f"Forbidden by the policy ({where}): {why}. It was not run and cannot be approved."


async def audit_gate_rule(ctx: RunContext, row: ToolCallRow) -> None:
    """Audit "gate" for a gated call: the tool, the server (for an MCP tool) and the rule."""
    decision = call_decision(ctx, row)
    await ctx.store.audit(
        "gate",
        actor=row.requested_by,
        session_id=row.session_id,
        call_id=row.call_id,
        details={
            "ledger_id": row.id,
            "tool": row.tool,
            "rule": decision.rule,
            "policy_rule": decision.policy_rule,
            "tier": decision.tier,
        },
    )
