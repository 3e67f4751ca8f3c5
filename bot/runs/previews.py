"""Previews: running a call's preview, storing it before its card is posted, what the card shows
of it, and the files it read checked again right before the approved call runs.

It imports nothing of the card, the gate or the decision, which all use it: the step that binds
a preview to an approval (`Previews.before_approval`, "Re-run preview") is the decision's, in
`bot.runs.decisions`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_core import AgentRunOptions, Tool, ToolCall, ToolError
from agent_core.tools import current_call_id

from ..policy import GateDecision, PreviewPlan
from ..store import StoredInput, StoredPreview, ToolCallRow
from ..tools import RunAsError, resolve_run_as
from ..tools.preview import (
    PREVIEW_TIMEOUT,
    PreviewResult,
    changed_inputs,
    failed_preview,
    read_inputs,
    run_preview,
    run_tool_preview,
)
from .context import RunContext, thread_of
from .views import CardPreview, preview_file

__all__ = [
    "FileChanged",
    "attach_preview",
    "bound_options",
    "card_preview",
    "current_preview",
    "ensure_preview",
    "run_plan",
]


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


# -- a preview's inputs, bound to the run -----------------------------------------------------
# The run side of a preview's inputs: right before an approved call runs, the files its preview
# read are read again; if any changed, the call does not run.
#
# The batch's calls run in the model's order when it resumes, so an ungated sibling that ran a
# moment before may have rewritten the very file a person approved a preview of. The check is a
# wrapper around the tool, made per resume for the calls of that batch whose stored preview read
# files (`StoredPreview.inputs`); it runs inside the tool loop, after the call was claimed and
# right before the tool itself. A refusal is the call's result ("the file changed since the
# preview", which the model reads and the thread shows) and an audited `refusal`; nothing runs.


class FileChanged(ToolError):
    """A file an approved call's preview read is not as it was: the call does not run."""

    def __init__(self, paths: Sequence[str]) -> None:
        names = ", ".join(repr(path) for path in paths)
        super().__init__(
            f"the file changed since the preview: {names}; nothing ran. The approval was "
            "given on the preview of the file as it was; ask again to run it on the new one."
        )
        self.paths = tuple(paths)


class _Bound:
    """`tool`, checking the bound inputs of the calls in `rows` (by call id) before it runs."""

    def __init__(self, ctx: RunContext, tool: Tool, rows: Mapping[str, ToolCallRow]) -> None:
        self._ctx = ctx
        self._tool = tool
        self._rows = rows

    @property
    def name(self) -> str:
        return self._tool.name

    @property
    def description(self) -> str:
        return self._tool.description

    @property
    def parameters(self) -> dict[str, Any]:
        return self._tool.parameters

    def requires_approval(self) -> bool:
        return self._tool.requires_approval()

    async def invoke(self, arguments: dict[str, Any]) -> str:
        row = self._rows.get(current_call_id.get() or "")
        if row is not None:
            await self._check(row)
        return await self._tool.invoke(arguments)

    async def _check(self, row: ToolCallRow) -> None:
        stored = row.preview_run()
        inputs: tuple[StoredInput, ...] = () if stored is None else stored.inputs
        changed = await asyncio.to_thread(changed_inputs, inputs)
        if not changed:
            return
        await self._ctx.store.audit(
            "refusal",
            actor=None,
            session_id=row.session_id,
            call_id=row.call_id,
            details={
                "ledger_id": row.id,
                "tool": row.name,
                "digest": row.running_digest,
                "action": "execute",
                "why": "preview_input_changed",
                "changed": list(changed),
                "preview_digest": None if stored is None else stored.digest,
                "rule": None,
                "policy_rule": None,
            },
        )
        raise FileChanged(changed)


def bound_options(
    ctx: RunContext, options: AgentRunOptions, batch: Sequence[ToolCallRow]
) -> AgentRunOptions:
    """`options` (of the resume of `batch`) with the tools that have an approved call whose
    preview read files wrapped, so that those files are checked right before that call runs."""
    rows: dict[str, dict[str, ToolCallRow]] = {}
    for row in batch:
        stored = row.preview_run()
        if row.status == "approved" and stored is not None and stored.inputs:
            rows.setdefault(row.name, {})[row.call_id] = row
    if not rows:
        return options
    offered = ctx.tools.values() if options.tools is None else options.tools
    tools = tuple(
        _Bound(ctx, tool, rows[tool.name]) if tool.name in rows else tool for tool in offered
    )
    return dataclasses.replace(options, tools=tools)
