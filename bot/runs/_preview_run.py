"""Running a call's preview and what its card shows of it (the machinery of `previews.py`,
which `cards.py` uses before it posts a card; it imports nothing of the card or the gate)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

from agent_core import ToolCall

from ..policy import GateDecision, PreviewPlan
from ..store import StoredInput, StoredPreview, ToolCallRow
from ..tools import RunAsError, resolve_run_as
from ..tools.preview import (
    PREVIEW_TIMEOUT,
    PreviewResult,
    failed_preview,
    read_inputs,
    run_preview,
    run_tool_preview,
)
from .context import RunContext, thread_of
from .views import CardPreview, preview_file

__all__ = ["attach_preview", "card_preview", "current_preview", "ensure_preview", "run_plan"]


async def run_plan(ctx: RunContext, plan: PreviewPlan) -> StoredPreview:
    """Run a preview once, under the preview's own bounds: a command as `[tools.run_command]`
    says (`run_as`, `workdir`), or a custom or MCP tool's paired tool; a placeholder without a
    value runs nothing and fails (the files the command reads are bound all the same)."""
    ran_at = ctx.clock()
    if plan.tool is not None:
        result = await _call(ctx, plan.tool, plan.arguments or "{}")
    elif plan.argv is None:
        why = plan.missing or "nothing to run"
        workdir = _workdir(ctx)
        result = failed_preview(why, await asyncio.to_thread(read_inputs, plan.inputs, (), workdir))
    else:
        result = await _run(ctx, plan.argv, plan.inputs)
    return StoredPreview(
        argv=plan.argv or (),
        output=result.output,
        exit_status=result.exit_status,
        failed=result.failed,
        ran_at=ran_at,
        seconds=result.seconds,
        digest=result.digest,
        tool=plan.tool,
        arguments=plan.arguments,
        inputs=tuple(StoredInput(**dataclasses.asdict(i)) for i in result.inputs),
    )


def _workdir(ctx: RunContext) -> Path:
    """Where commands, and so previews, run: relative inputs are read from there."""
    return ctx.policy.tool_policy("run_command").workdir or Path.cwd()


async def _call(ctx: RunContext, name: str, arguments: str) -> PreviewResult:
    """A custom or MCP tool's preview: its paired tool, only if the policy lets that tool run
    without approval (a preview never needs one, so it must be read-only by the policy)."""
    tool = ctx.tools.get(name)
    if tool is None:
        return failed_preview(f"no tool named {name!r} to preview with")
    call = ToolCall(id="preview", name=name, arguments=arguments)
    if ctx.policy.decide(tool, call).requires_approval:
        return failed_preview(
            f"the preview tool {name!r} needs approval itself; name a read-only tool"
        )
    return await run_tool_preview(tool, json.loads(arguments))


async def _run(ctx: RunContext, argv: tuple[str, ...], inputs: tuple[str, ...]) -> PreviewResult:
    config = ctx.policy.tool_policy("run_command")
    try:
        run_as = resolve_run_as(config.run_as) if config.run_as else None
    except RunAsError as exc:
        read = await asyncio.to_thread(read_inputs, inputs, argv, _workdir(ctx))
        return failed_preview(f"cannot run as {config.run_as!r}: {exc}", read)
    timeout = PREVIEW_TIMEOUT
    if config.timeout is not None:
        timeout = min(timeout, config.timeout.total_seconds())
    return await run_preview(
        argv,
        workdir=_workdir(ctx),
        run_as=run_as,
        timeout=timeout,
        env=config.env,
        inputs=inputs,
    )


def current_preview(row: ToolCallRow, plan: PreviewPlan) -> StoredPreview | None:
    """The stored preview if it is of this plan (an edit changes what the preview runs)."""
    stored = row.preview_run()
    if stored is None or (stored.argv, stored.tool, stored.arguments) != (
        plan.argv or (),
        plan.tool,
        plan.arguments,
    ):
        return None
    return stored


async def ensure_preview(ctx: RunContext, row: ToolCallRow, decision: GateDecision) -> ToolCallRow:
    """Before a card is posted: run the deciding rule's preview unless the call has one."""
    plan = decision.preview
    if plan is None or row.status != "pending" or current_preview(row, plan) is not None:
        return row
    stored = await run_plan(ctx, plan)
    updated = await ctx.store.set_preview(row.id, stored, why="card", actor=row.requested_by)
    if updated is not None:
        await attach_preview(ctx, updated, stored)
    return updated or row


async def attach_preview(ctx: RunContext, row: ToolCallRow, stored: StoredPreview) -> None:
    """Attach a preview longer than a card shows to the call's thread, whole (before the card
    that names the file is drawn)."""
    name = preview_file(row.call_id, stored.output, stored.digest)
    thread = None if name is None else await thread_of(ctx, row)
    if name is not None and thread is not None:
        await ctx.output.upload(thread, name, stored.output)


def card_preview(row: ToolCallRow, decision: GateDecision) -> CardPreview | None:
    """What the card shows of the preview (None: the rule has none, or it has not run)."""
    plan = decision.preview
    stored = None if plan is None else current_preview(row, plan)
    if plan is None or stored is None:
        return None
    return CardPreview(
        command=plan.shown() if stored.argv or stored.tool else plan.template,
        output=stored.output,
        exit_status=stored.exit_status,
        failed=stored.failed,
        ran_at=stored.ran_at,
        digest=stored.digest,
        file=preview_file(row.call_id, stored.output, stored.digest),
        inputs=tuple((i.path, i.state, i.digest) for i in stored.inputs),
    )
