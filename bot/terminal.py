"""`opsgate chat`: the same agent, tools, policy and SQLite store, with approvals at the prompt.

Lets a team try its tools and policy before going to Slack. The person at the terminal is both
requester and approver, so the Slack approver rules do not apply here; every decision is still
recorded in the ledger and the audit log, as `terminal:<login>`.
"""

from __future__ import annotations

import asyncio
import getpass
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import TextIO

from agent_core import (
    AgentResponseUpdate,
    AgentRunOptions,
    AgentSession,
    Finish,
    FinishReason,
    TextDelta,
    ToolResult,
)

from .deps import Deps, open_deps
from .settings import Settings, load_settings
from .tools import protect_process_environment

__all__ = ["run_chat"]


def _ask(prompt: str, input_fn: Callable[[str], str]) -> str | None:
    try:
        return input_fn(prompt)
    except EOFError:
        return None


async def run_chat(
    *,
    settings: Settings | None = None,
    input_fn: Callable[[str], str] = input,
    out: TextIO | None = None,
    deps: Deps | None = None,
) -> int:
    import sys

    out = out or sys.stdout
    if deps is None:
        protect_process_environment()
        settings = settings or load_settings(mode="chat")
        async with open_deps(settings) as opened:
            return await _chat(opened, input_fn, out)
    return await _chat(deps, input_fn, out)


async def _chat(deps: Deps, input_fn: Callable[[str], str], out: TextIO) -> int:
    store = deps.store
    who = f"terminal:{getpass.getuser()}"
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    session = await store.get_or_create_session("terminal", "terminal", started)
    print("OpsGate chat. Risky tool calls ask for approval here. Ctrl-D to quit.", file=out)
    while True:
        line = await asyncio.to_thread(_ask, "you> ", input_fn)
        if line is None:
            print(file=out)
            return 0
        if not line.strip():
            continue
        if not await store.claim(session.id, ("idle", "failed"), "running"):
            print("(the previous run is still pending)", file=out)
            continue
        await store.set_requester(session.id, who)
        stream: AsyncIterator[AgentResponseUpdate] | None = deps.agent.run(
            line, AgentSession(session.id)
        )
        while stream is not None:
            paused = await _show(stream, out)
            stream = None
            if not paused:
                await store.set_state(session.id, "idle")
                break
            for row in await store.batch_calls(session.id):
                if not row.needs_approval or row.status != "pending":
                    continue
                arguments = json.dumps(row.arguments_value(), indent=2, ensure_ascii=False)
                print(f"\n{row.tool} wants to run (digest {row.digest}):\n{arguments}", file=out)
                answer = await asyncio.to_thread(
                    _ask, "approve? [y/N, or a reason to reject] ", input_fn
                )
                answer = (answer or "").strip()
                if answer.lower() in ("y", "yes"):
                    await store.decide(row.id, "approved", user_id=who, rule="terminal")
                else:
                    reason = answer if answer.lower() not in ("", "n", "no") else None
                    await store.decide(
                        row.id, "rejected", user_id=who, reason=reason, rule="terminal"
                    )
            await store.claim(session.id, ("awaiting_approval",), "running")
            responses = await store.responses_for_batch(session.id)
            options = AgentRunOptions().with_tool_approval_responses(responses)
            stream = deps.agent.run(None, AgentSession(session.id), options)


async def _show(stream: AsyncIterator[AgentResponseUpdate], out: TextIO) -> bool:
    """Print a run; True if it paused for approval."""
    async for update in stream:
        match update:
            case TextDelta(text=text):
                print(text, end="", file=out, flush=True)
            case ToolResult(name=name, content=content, is_error=is_error):
                mark = "✗" if is_error else "✓"
                print(f"\n[{mark} {name}] {content}", file=out)
            case Finish(finish_reason=FinishReason.AWAITING_APPROVAL):
                return True
            case Finish(finish_reason=FinishReason.ERROR, error=error):
                print(f"\n[error] {error}", file=out)
            case Finish():
                print(file=out)
    return False
