"""The audit row that says which policy rule made a call wait for a human.

The store audits the request itself ("request"); the rule comes from the policy, which the
store does not know, so the run service adds it when it posts the call's card.
"""

from __future__ import annotations

from agent_core import ToolCall

from ..store import ToolCallRow
from ._context import RunContext

__all__ = ["audit_gate_rule"]


async def audit_gate_rule(ctx: RunContext, row: ToolCallRow) -> None:
    """Audit "gate" for a gated call: the tool, the server (for an MCP tool) and the rule."""
    shown = row.arguments_value()
    call = ToolCall(
        id=row.call_id,
        name=row.tool,
        arguments=row.arguments if isinstance(shown, dict) else str(shown),
    )
    tool = ctx.tools.get(row.tool)
    decision = ctx.policy.decide(tool if tool is not None else row.tool, call)
    await ctx.store.audit(
        "gate",
        actor=row.requested_by,
        session_id=row.session_id,
        call_id=row.call_id,
        details={"ledger_id": row.id, "tool": row.tool, "rule": decision.rule},
    )
