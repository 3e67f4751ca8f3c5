"""Previews of custom and MCP tools: the tool's policy names a paired read-only tool
(`preview`, with `preview_args` filled from the call), called before the card is posted, its
output on the card and bound to Approve like a command's preview. End to end: signed requests
into the real Bolt app, the Slack and LLM stand-ins, a team's own tools
(`tests/support/custom_tools.py`) and the demo MCP server as a subprocess."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path

import pytest

from agent_core import Tool
from bot.policy import Policy
from tests.scenarios.test_app import ALICE, BOB, make_tools
from tests.scenarios.test_mcp import calls_in, demo_policy
from tests.scenarios.test_previews import Clock, _audit, _blocks, _buttons, _drawn
from tests.support import custom_tools
from tests.support.custom_tools import restart_service, service_status
from tests.support.harness import running_bot

CUSTOM = """
[tools.restart_service]
approval = "always"
preview = "service_status"
preview_args = { name = "{name}" }
preview_ttl = "5m"

[tools.service_status]
approval = "never"
"""


def _tools(tmp_path: Path) -> list[Tool]:
    return [*make_tools(tmp_path), restart_service, service_status]


async def test_a_custom_tools_preview_is_its_paired_tools_output_bound_to_approve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(custom_tools.STATUS, "web", "running (pid 42)")
    policy = Policy.from_toml(CUSTOM)
    async with running_bot(tmp_path, tools=_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "restart_service", {"name": "web"})])
        await bot.mention("restart web", user=ALICE)
        [card] = await bot.wait_cards(1)
        blocks = _blocks(card["params"])
        shown = json.dumps(blocks, ensure_ascii=False)
        assert "*Preview*" in shown and "web: running (pid 42)" in shown
        assert 'service_status {\\"name\\":\\"web\\"}' in shown
        digest = hashlib.sha256(b"web: running (pid 42)").hexdigest()
        assert f"preview digest `{digest[:12]}`" in shown
        assert "Re-run preview" in _buttons(blocks)
        [actions] = [b for b in blocks if b["type"] == "actions"]
        assert actions["block_id"].endswith(f".{digest}")
        [ran] = await _audit(bot, "preview")
        assert ran["preview_tool"] == "service_status" and ran["why"] == "card"
        assert ran["preview_arguments"] == '{"name":"web"}' and ran["digest"] == digest

        bot.llm.reply_text("Restarted.")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [decision] = await _audit(bot, "decision")
        assert decision["preview_digest"] == digest and decision["final"] is True
        tool_message = [m for m in bot.llm.requests[1]["messages"] if m["role"] == "tool"]
        assert tool_message[-1]["content"] == "would restart web"


async def test_a_custom_tools_changed_preview_refuses_the_approval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setitem(custom_tools.STATUS, "web", "running")
    policy = Policy.from_toml(CUSTOM)
    async with running_bot(
        tmp_path,
        tools=_tools(tmp_path),
        policy=policy,
        clock=clock,
    ) as bot:
        bot.llm.reply_tool_calls([("call_1", "restart_service", {"name": "web"})])
        await bot.mention("restart web", user=ALICE)
        [card] = await bot.wait_cards(1)
        clock.now += timedelta(minutes=6)  # older than its preview_ttl
        monkeypatch.setitem(custom_tools.STATUS, "web", "stopped")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.settle()
        told = bot.slack.calls_to("chat.postEphemeral")[-1].params
        assert "the preview changed: look again" in told["text"]
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending"
        assert [r["why"] for r in await _audit(bot, "preview")] == ["card", "stale"]
        assert "web: stopped" in json.dumps(_drawn(bot, card["ledger_id"]))
        assert len(bot.llm.requests) == 1, "nothing ran"


async def test_a_preview_tool_that_needs_approval_itself_is_not_called(tmp_path: Path) -> None:
    policy = Policy.from_toml(
        '[tools.restart_service]\npreview = "echo"\npreview_args = { text = "{name}" }\n'
        '[tools.echo]\napproval = "always"\n'
    )
    async with running_bot(tmp_path, tools=_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "restart_service", {"name": "web"})])
        await bot.mention("restart web", user=ALICE)
        [card] = await bot.wait_cards(1)
        blocks = _blocks(card["params"])
        shown = json.dumps(blocks, ensure_ascii=False)
        assert "*preview failed*" in shown and "needs approval itself" in shown
        assert "echo: web" not in shown
        assert _buttons(blocks)[0] == "Approve"  # with the warning, as for a command


async def test_an_mcp_tools_preview_calls_the_servers_read_only_tool(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    policy = demo_policy(
        log,
        "[mcp_servers.demo.tools.delete_release]\n"
        'approval = "always"\npreview = "status"\npreview_args = { service = "{release}" }\n'
        "[mcp_servers.demo.tools.record]\n"
        'approval = "always"\npreview = "record"\npreview_args = { note = "preview {note}" }\n',
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "demo__delete_release", {"release": "web-1"})])
        await bot.mention("delete web-1", user=ALICE)
        [card] = await bot.wait_cards(1)
        shown = json.dumps(_blocks(card["params"]), ensure_ascii=False)
        assert "*Preview*" in shown and "web-1 is up" in shown
        [ran] = await _audit(bot, "preview")
        assert ran["preview_tool"] == "demo__status" and ran["failed"] is None
        assert ran["digest"] == hashlib.sha256(b"web-1 is up").hexdigest()

        bot.llm.reply_text("Deleted.")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [decision] = await _audit(bot, "decision")
        assert decision["preview_digest"] == ran["digest"]

        # A "preview" naming a tool that is not read-only is never called.
        bot.llm.reply_tool_calls([("call_2", "demo__record", {"note": "deploy-42"})])
        await bot.mention("record it", user=ALICE, ts="1700000002.000100")
        cards = await bot.wait_cards(2)
        shown = json.dumps(_blocks(cards[-1]["params"]), ensure_ascii=False)
        assert "*preview failed*" in shown and "needs approval itself" in shown
        assert calls_in(log) == []
