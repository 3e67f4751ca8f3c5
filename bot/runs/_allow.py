"""Allowances in the run service: granting one from a card, the per-run gate that applies them,
listing and revoking.

An allowance applies only where the policy still offers "Allow for" for the call (`allow_for`
set, on its rule or its tool) when it needs a single approval, and only to calls the policy
would otherwise gate: a policy that says `approval = "always"` without `allow_for` is never
bypassed, and a forbidden call, or one a stricter rule decides, never runs under one
(`bot.allowances.covers`). Using one claims nothing (two runs may use it at once); each use is
audited and said in the thread.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from agent_core import ApprovalGate, Tool, ToolCall

from .._duration import format_duration
from ..allowances import (
    ArgvShape,
    Shape,
    covers,
    dump_shape,
    examples_for,
    load_shape,
    offered_shapes,
    shape_of,
)
from ..policy import GateDecision
from ..store import AllowanceGrant, AllowanceRow, SessionRow, ToolCallRow
from ._context import RunContext
from ._gate_audit import call_decision
from .notices import Notice
from .output import Thread
from .ux import (
    AllowanceInfo,
    AllowanceRevoked,
    AllowanceUsed,
    AllowChoice,
    AllowForm,
    NothingRevoked,
)

__all__ = ["Allowances", "allow_choices", "allow_window", "info", "scope"]

logger = logging.getLogger("opsgate.runs")


def info(row: AllowanceRow) -> AllowanceInfo:
    return AllowanceInfo(
        row.id, row.channel_id, row.tool, row.label, row.granted_by, row.expires_at
    )


def allow_window(ctx: RunContext, row: ToolCallRow, channel: str) -> timedelta | None:
    """How long an allowance from the card of `row` in `channel` lasts; None when the card
    offers no "Allow for" (no `allow_for`, more than one approval needed, a forbidden call, or
    one no allowance may cover: compound, redirected, substituted, wrapped)."""
    decision = call_decision(ctx, row)
    window = ctx.policy.allow_window(row.tool, channel, decision)
    arguments = row.running_arguments()
    if window is None or not isinstance(arguments, dict):
        return None
    return window if shape_of(row.tool, arguments, decision) is not None else None


def allow_choices(ctx: RunContext, row: ToolCallRow) -> tuple[Shape, ...]:
    """The shapes the granter chooses from in the Allow dialog; empty when there is no choice
    to make (one shape, or the deciding rule declares its `allow_prefix`)."""
    decision = call_decision(ctx, row)
    arguments = row.running_arguments()
    if decision.allow_prefix is not None or not isinstance(arguments, dict):
        return ()
    shapes = offered_shapes(row.tool, arguments, decision)
    return shapes if len(shapes) > 1 else ()


def scope(row: ToolCallRow, decision: GateDecision | None = None) -> str:
    """The call shape an allowance granted on `row` covers, in words."""
    arguments = row.running_arguments()
    if not isinstance(arguments, dict):
        return ""
    shape = shape_of(row.tool, arguments, decision)
    return "" if shape is None else shape.label(row.tool)


class Allowances:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def offered(self, row: ToolCallRow, channel: str) -> bool:
        """Whether the card of `row` in `channel` offers "Allow for <duration>"."""
        return allow_window(self.ctx, row, channel) is not None

    def choices(self, row: ToolCallRow) -> tuple[Shape, ...]:
        return allow_choices(self.ctx, row)

    def form(self, row: ToolCallRow, channel: str) -> AllowForm | None:
        """The Allow dialog for `row`, or None when a click allows at once."""
        shapes = self.choices(row)
        window = allow_window(self.ctx, row, channel)
        if not shapes or window is None:
            return None
        options = tuple(
            AllowChoice(_choice_label(shape, row.tool), *examples_for(shape)) for shape in shapes
        )
        return AllowForm(row.id, row.tool, row.running_digest, format_duration(window), options)

    def grant_for(
        self, row: ToolCallRow, session: SessionRow, choice: int | None = None
    ) -> AllowanceGrant:
        """The allowance an "Allow for" click on `row` asks for (stored with its approval);
        only for a row `offered` says yes to. `choice`: the dialog's pick among `choices`."""
        decision = call_decision(self.ctx, row)
        window = self.ctx.policy.allow_window(row.tool, session.channel_id, decision)
        arguments = row.running_arguments()
        shape = shape_of(row.tool, arguments if isinstance(arguments, dict) else {}, decision)
        shapes = self.choices(row)
        if choice is not None and 0 <= choice < len(shapes):
            shape = shapes[choice]
        assert window is not None and shape is not None
        return AllowanceGrant(
            channel_id=session.channel_id,
            tool=row.tool,
            shape=dump_shape(shape),
            label=shape.label(row.tool),
            expires_at=self.ctx.clock() + window,
        )

    def gate(self, thread: Thread, session_id: str) -> ApprovalGate:
        """The approval gate of one run in `thread`: the policy's, then the channel's
        allowances for calls it would gate."""
        return _Gate(self, thread, session_id)

    async def active(self, channel: str | None = None) -> list[AllowanceInfo]:
        rows = await self.ctx.store.active_allowances(channel_id=channel, now=self.ctx.clock())
        return [info(r) for r in rows]

    async def revoke(self, allowance_id: str, *, user: str, team: str | None) -> Notice:
        """End an allowance: its granter, or anyone who may approve in its channel, may."""
        store = self.ctx.store
        row = await store.get_allowance(allowance_id)
        if row is None or not row.active(self.ctx.clock()):
            return NothingRevoked("that allowance has already ended")
        if user != row.granted_by:
            verdict = await self.ctx.approvals.check(
                "approve", channel=row.channel_id, user=user, requester=None, user_team=team
            )
            if verdict.kind == "refused":
                return NothingRevoked("only its granter or an approver of its channel may")
        if not await store.revoke_allowance(allowance_id, user_id=user):
            return NothingRevoked("someone revoked it first")
        return AllowanceRevoked(info(row), user)


def _choice_label(shape: Shape, tool: str) -> str:
    """The dialog's words for a shape: `exact: kubectl get pods -n a`, `kubectl get pods …`."""
    if isinstance(shape, ArgvShape):
        words = " ".join(shape.argv)
        return f"{words} …" if shape.prefix else f"exact: {words}"
    return f"exact: {shape.label(tool)}"


class _Gate:
    def __init__(self, owner: Allowances, thread: Thread, session_id: str) -> None:
        self.owner = owner
        self.thread = thread
        self.session_id = session_id

    async def __call__(self, tool: Tool, call: ToolCall) -> bool:
        ctx = self.owner.ctx
        decision = ctx.policy.decide(tool, call)
        if not decision.requires_approval:
            return False
        channel = self.thread.channel_id
        if decision.forbidden or ctx.policy.allow_window(tool.name, channel, decision) is None:
            return True
        arguments = call.parsed_arguments()
        for row in await ctx.store.active_allowances(channel_id=channel, now=ctx.clock()):
            shape = load_shape(row.shape)
            if row.tool != tool.name or shape is None:
                continue
            if covers(shape, tool.name, arguments, decision):
                await self._used(row, call)
                return False
        return True

    async def _used(self, row: AllowanceRow, call: ToolCall) -> None:
        ctx = self.owner.ctx
        await ctx.store.audit(
            "allowance_used",
            actor=row.granted_by,
            session_id=self.session_id,
            call_id=call.id,
            details={
                "allowance_id": row.id,
                "granted_by": row.granted_by,
                "tool": call.name,
                "arguments": call.parsed_arguments(),
            },
        )
        await ctx.output.say(self.thread, AllowanceUsed(call.name, info(row)))
