"""The run side of a preview's inputs: right before an approved call runs, the files its preview
read are read again; if any changed, the call does not run.

The batch's calls run in the model's order when it resumes, so an ungated sibling that ran a
moment before may have rewritten the very file a person approved a preview of. The check is a
wrapper around the tool, made per resume for the calls of that batch whose stored preview read
files (`StoredPreview.inputs`); it runs inside the tool loop, after the call was claimed and
right before the tool itself. A refusal is the call's result ("the file changed since the
preview", which the model reads and the thread shows) and an audited `refusal`; nothing runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from agent_core import AgentRunOptions, Tool, ToolError
from agent_core.tools import current_call_id

from ..store import StoredInput, ToolCallRow
from ..tools.preview import changed_inputs
from .context import RunContext

__all__ = ["FileChanged", "bound_options"]


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
