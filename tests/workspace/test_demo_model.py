"""The demo model is an ordinary OpenAI-compatible streaming endpoint: the product's own client
streams from it over loopback HTTP, gets a `run_command` call for `run:` and words otherwise,
and every answer says it is the demo model. The default policy is the one the page describes."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from agent_core import ChatMessage, ToolCall
from agent_core.messages import TextDelta, ToolCallEnded
from agent_core.openai import OpenAIChatClient
from agent_core.tools import FunctionTool
from bot.cli.policy import explain
from bot.workspace.startup import DEMO_MODEL, DEMO_NOTE, DemoModel
from bot.workspace.state import PEOPLE, workspace_policy
from tests.support.loopback import serve_on_loopback


async def run_command(command: str) -> str:
    """Runs a shell command."""
    return command


TOOL = FunctionTool(run_command, name="run_command", description="Runs a shell command.")


@pytest.fixture
async def model() -> AsyncIterator[OpenAIChatClient]:
    app = web.Application()
    app.add_routes(DemoModel(pace=0).routes())
    runner, base = await serve_on_loopback(app)
    try:
        async with httpx.AsyncClient() as http:
            yield OpenAIChatClient(http, model=DEMO_MODEL, base_url=f"{base}{DemoModel.PREFIX}")
    finally:
        await runner.cleanup()


async def _turn(model: OpenAIChatClient, messages: list[ChatMessage]) -> tuple[str, list[Any]]:
    text, calls = "", []
    async for update in model.stream(messages, tools=[TOOL]):
        if isinstance(update, TextDelta):
            text += update.text
        elif isinstance(update, ToolCallEnded):
            calls.append(update.call)
    return text, calls


async def test_run_asks_for_the_command_and_the_answer_reports_its_output(
    model: OpenAIChatClient,
) -> None:
    asked = [ChatMessage.user("please run: df -h /")]
    text, calls = await _turn(model, asked)
    assert DEMO_NOTE in text
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("run_command", {"command": "df -h /"})
    ]
    call = ToolCall(id=calls[0].id, name="run_command", arguments=calls[0].arguments)
    ran = [*asked, ChatMessage.assistant(text, (call,)), ChatMessage.tool("42% used", call.id)]
    text, calls = await _turn(model, ran)
    assert DEMO_NOTE in text and "42% used" in text and calls == []


async def test_without_run_it_explains_the_flow(model: OpenAIChatClient) -> None:
    text, calls = await _turn(model, [ChatMessage.user("what can you do?")])
    assert DEMO_NOTE in text and "run: df -h" in text and calls == []
    assert await model.context_window() is not None  # start-up asks it, as any server


def test_the_default_policy_names_the_requester_and_two_approvers() -> None:
    policy, text = workspace_policy(None)
    assert text.built_in
    requester, *approvers = (p.user_id for p in PEOPLE)
    assert list(policy.defaults.approvers) == approvers
    assert requester not in policy.defaults.approvers
    assert not policy.defaults.allow_self_approval
    verdicts = {}
    for command in ("df -h", "uptime", "ls /tmp", "systemctl restart nginx", "rm -rf /tmp/x"):
        out = io.StringIO()
        explain(policy, "run_command", command, out=out)
        verdicts[command] = next(
            line for line in out.getvalue().splitlines() if line.startswith("verdict:")
        )
    out = io.StringIO()
    explain(policy, "run_command", "rm -rf /", out=out)
    assert "verdict: forbidden" in out.getvalue()
    assert verdicts["df -h"] == verdicts["uptime"] == verdicts["ls /tmp"]
    assert verdicts["df -h"] == "verdict: runs without approval"
    assert verdicts["systemctl restart nginx"].startswith("verdict: needs 1 approval")
    assert verdicts["rm -rf /tmp/x"].startswith("verdict: needs 2 approvals")
