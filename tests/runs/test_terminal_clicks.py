"""The terminal decides on what it printed: its approval is a `Click` carrying the printed
card's digest, so a call whose arguments changed after the prompt was drawn is not approved by
an answer given to the old one (as a click on a card drawn before an edit approves nothing)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from bot.cli.chat import run_chat
from bot.wiring import open_deps
from tests.processes.test_cli import settings_for
from tests.scenarios.test_app import make_tools
from tests.support.llm_server import LLMStandIn


async def test_the_terminal_approves_only_the_arguments_it_printed(tmp_path: Path) -> None:
    printed, edited = tmp_path / "printed", tmp_path / "edited"
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": f"touch {printed}"})])
        llm.reply_text("Done.")
        out = io.StringIO()
        async with open_deps(
            settings_for(tmp_path, llm.base_url), tools=make_tools(tmp_path)
        ) as deps:
            loop = asyncio.get_running_loop()
            asked: list[str] = []

            async def edit_behind_the_prompt() -> None:
                """Someone else changes the call's arguments while the prompt waits."""
                [pending] = await deps.store.pending_approvals()
                arguments = json.dumps({"command": f"touch {edited}"})
                await deps.store.edit_call(
                    pending.call.id, arguments, "e" * 64, user_id="U0EDITOR", approve=False
                )

            def answer(prompt: str) -> str:
                asked.append(prompt)
                if len(asked) == 1:
                    return "touch it"
                if len(asked) == 2:
                    asyncio.run_coroutine_threadsafe(edit_behind_the_prompt(), loop).result(10)
                    return "y"
                raise EOFError

            code = await run_chat(deps=deps, input_fn=answer, out=out)
            [pending] = await deps.store.pending_approvals()
            audit = await deps.store.audit_rows()
    assert code == 0
    assert asked[1].startswith("approve?")
    assert "the arguments changed since this card was drawn" in out.getvalue()
    assert pending.call.status == "pending" and pending.call.approvals == ()
    assert not printed.exists() and not edited.exists()
    assert not [a for a in audit if a.event == "decision"]
    [refusal] = [a for a in audit if a.event == "refusal"]
    assert refusal.details["why"] == "arguments_changed"
