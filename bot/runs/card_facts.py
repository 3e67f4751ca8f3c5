"""What a card tells the person deciding, beyond the call itself: the model's stated reason
for the call, which parts of a command the policy judged and why, and why "Allow for" is
absent when it is.

All of it is plain data for `CardCall`; the renderers escape what is untrusted (the model's
words, the command's text).
"""

from __future__ import annotations

from typing import Any

from agent_core import Tool

from ..allowances import shape_of
from ..policy import GateDecision
from ..store import ToolCallRow
from .context import RunContext
from .views import CardPart

__all__ = ["REASON_ARGUMENTS", "absent_allow", "card_parts", "model_reason"]

REASON_ARGUMENTS = ("reason", "justification")
"""Arguments a tool's schema may declare for the model to say why it calls it."""

_TIERS = {"never": "runs without approval", "forbidden": "forbidden"}


async def model_reason(ctx: RunContext, row: ToolCallRow, tool: Tool | None) -> str | None:
    """What the model said of the call: a `reason`/`justification` argument the tool's schema
    declares, else the text of the assistant turn that asked for it (None: it said nothing)."""
    arguments = row.running_arguments()
    declared = _declared(tool)
    for name in REASON_ARGUMENTS:
        value = arguments.get(name) if isinstance(arguments, dict) else None
        if name in declared and isinstance(value, str) and value.strip():
            return value.strip()
    message = await ctx.store.message_at(row.session_id, row.message_seq)
    if message is None or message.role != "assistant" or not message.content:
        return None
    return message.content.strip() or None


def _declared(tool: Tool | None) -> frozenset[str]:
    properties: Any = {} if tool is None else tool.parameters.get("properties", {})
    return frozenset(properties) if isinstance(properties, dict) else frozenset()


def card_parts(decision: GateDecision) -> tuple[CardPart, ...]:
    """Each simple command the policy judged, in `policy explain`'s words, and the whole
    command's own reason for a card when it has one (e.g. text that does not parse)."""
    parts = [
        CardPart(p.text, _TIERS.get(p.tier, "needs approval"), p.policy_rule, p.why)
        for p in decision.parts
    ]
    parsed = decision.command
    if parsed is not None:
        whole = parsed.unjudgeable.difference(*(p.flags for p in parsed.parts))
        if whole:
            why = f"{', '.join(sorted(whole))}: approval required"
            parts.append(CardPart("the whole command", "needs approval", None, why))
    return tuple(parts)


def absent_allow(
    ctx: RunContext, row: ToolCallRow, channel: str, decision: GateDecision, offered: bool
) -> str | None:
    """Why the card of `row` offers no "Allow for", in words (the first that holds: forbidden,
    several rules, a preview, a quorum, a call no allowance may cover, no `allow_for`);
    None when it offers one."""
    if offered:
        return None
    if decision.forbidden:
        return "the policy forbids this call"
    own = decision.allow_for or ctx.policy.tool_policy(row.tool).allow_for
    if len(decision.needs()) > 1:
        return "several rules must each approve this call"
    if decision.preview is not None:
        return "its rule shows a preview: an allowed call would run unseen"
    needed = ctx.policy.required_approvals_for(channel, decision)
    if needed != 1:
        return f"it needs {needed} approvals"
    arguments = row.running_arguments()
    if not isinstance(arguments, dict) or shape_of(row.tool, arguments, decision) is None:
        return (
            "no allowance may cover it: an allowance covers one plain command (no pipe, "
            "list, redirection, substitution, expansion or wrapper)"
        )
    if own is None:
        where = decision.policy_rule or f"tools.{row.tool}"
        return f"{where} sets no allow_for"
    return None
