"""The terminal decides through the same run service and store as Slack: a command whose parts
match two rules that ask waits until each rule's quorum is met (the person at the terminal
counts toward every rule; a second person is still needed for a rule of two)."""

from __future__ import annotations

import io
from pathlib import Path

from bot.cli.chat import run_chat
from bot.policy import Policy
from bot.wiring import open_deps
from tests.processes.test_cli import answers, settings_for
from tests.scenarios.test_app import make_tools
from tests.support.llm_server import LLMStandIn

POLICY = """
[defaults]
required_approvals = 2
[tools.run_command]
approval = "rules"
[[tools.run_command.rules]]
prefix = ["touch"]
required_approvals = 1
[[tools.run_command.rules]]
prefix = ["cp"]
"""


async def test_chat_waits_for_every_rules_quorum(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    command = f"touch {first}; cp {first} {second}"
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": command})])
        llm.reply_text("Copied, with two approvals.")
        settings = settings_for(tmp_path, llm.base_url)
        out = io.StringIO()
        async with open_deps(
            settings, tools=make_tools(tmp_path), policy=Policy.from_toml(POLICY)
        ) as deps:
            script = answers("copy it", "y", "carol", "y")
            code = await run_chat(deps=deps, input_fn=script, out=out)
            audit = await deps.store.audit_rows()
    assert code == 0
    assert second.exists()  # ran, after the second approval
    decisions = [a for a in audit if a.event == "decision"]
    assert [d.details["final"] for d in decisions] == [False, True]
    assert decisions[1].actor == "terminal:carol"
    first_decision = decisions[0].details["requirements"]
    assert [(r["key"], r["required_approvals"], len(r["approvals"])) for r in first_decision] == [
        ("tools.run_command.rules[0]", 1, 1),
        ("tools.run_command.rules[1]", 2, 1),
    ]
    shown = out.getvalue()
    assert "tools.run_command.rules[1] (cp …): 0 of 2 approvals" in shown
    assert "Copied, with two approvals." in shown
