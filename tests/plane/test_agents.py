"""Other agents through the plane: Claude Code's PreToolUse hook and the MCP server, against a
real `opsgate run --http`, decided by signed clicks. The hook is fed the PreToolUse inputs of
Claude Code's hooks reference byte for byte (tests/fixtures/claude-code/SOURCE.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.plane.support import OPSGATE, client_env, opsgate, plane_bot

pytestmark = pytest.mark.processes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code"


def _decision(out: str) -> dict[str, str]:
    """The hook's stdout, checked against the reference's PreToolUse decision control: one
    JSON object whose only key is `hookSpecificOutput`, holding exactly the event name, the
    decision and its reason, all strings."""
    answer = json.loads(out)
    assert list(answer) == ["hookSpecificOutput"], answer
    output: dict[str, str] = answer["hookSpecificOutput"]
    assert set(output) == {"hookEventName", "permissionDecision", "permissionDecisionReason"}
    assert output["hookEventName"] == "PreToolUse"
    assert output["permissionDecision"] in ("allow", "deny", "ask")
    assert isinstance(output["permissionDecisionReason"], str)
    assert output["permissionDecisionReason"]
    return output


async def test_the_claude_code_hook_allows_an_approved_bash_command(tmp_path: Path) -> None:
    payload = (FIXTURES / "pretooluse_bash.json").read_bytes()
    async with plane_bot(tmp_path) as plane:
        hook = await opsgate("hook", "claude-code", url=plane.bot.url, cwd=tmp_path, stdin=True)
        answered = asyncio.create_task(hook.result(stdin=payload))
        ledger_id, card_ts = await plane.card()
        shown = json.dumps(plane.slack.message("C0OPS", card_ts))
        assert "npm test" in shown and "Claude Code" in shown
        assert "/home/user/my-project" in shown and "abc123" in shown
        assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0BOB") == 200
        code, out, err = await answered
        assert code == 0, err
        output = _decision(out)
        assert output["permissionDecision"] == "allow"
        assert "U0BOB" in output["permissionDecisionReason"]


async def test_the_claude_code_hook_denies_a_rejected_write(tmp_path: Path) -> None:
    payload = (FIXTURES / "pretooluse_write.json").read_bytes()
    async with plane_bot(tmp_path) as plane:
        hook = await opsgate("hook", "claude-code", url=plane.bot.url, cwd=tmp_path, stdin=True)
        answered = asyncio.create_task(hook.result(stdin=payload))
        ledger_id, card_ts = await plane.card()
        shown = json.dumps(plane.slack.message("C0OPS", card_ts))
        assert "claude_code.Write" in shown and "/path/to/file.txt" in shown
        assert "file content" in shown
        await plane.reject(ledger_id, card_ts, "U0BOB", "not in prod")
        code, out, err = await answered
        assert code == 0, err
        output = _decision(out)
        assert output["permissionDecision"] == "deny"
        assert "not in prod" in output["permissionDecisionReason"]


async def test_the_hook_denies_when_opsgate_cannot_be_reached(tmp_path: Path) -> None:
    payload = (FIXTURES / "pretooluse_bash.json").read_bytes()
    hook = await opsgate("hook", "claude-code", url="http://127.0.0.1:9", cwd=tmp_path, stdin=True)
    code, out, _ = await hook.result(stdin=payload)
    assert code == 0 and _decision(out)["permissionDecision"] == "deny"


async def test_the_mcp_server_blocks_until_decided_and_returns_the_receipt(
    tmp_path: Path,
) -> None:
    async with plane_bot(tmp_path) as plane:
        params = StdioServerParameters(
            command=str(OPSGATE), args=["mcp-serve"], env=client_env(plane.bot.url)
        )
        async with Client(stdio_client(params)) as client:
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ["request_approval"]
            call = asyncio.create_task(
                client.call_tool(
                    "request_approval",
                    {"tool": "run_command", "arguments": {"command": "echo via mcp"}},
                )
            )
            ledger_id, card_ts = await plane.card()
            assert not call.done()
            assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0BOB") == 200
            result = await asyncio.wait_for(call, 60)
        answer = result.structured_content
        assert answer is not None and answer["state"] == "approved"
        assert str(answer["receipt"]).count(".") == 2
