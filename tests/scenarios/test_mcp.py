"""MCP tools in the running bot, over the Slack harness (real loopback HTTP, signed requests, the
LLM stand-in) with real MCP servers started as subprocesses: the demo server and the published
`mcp-server-git`. What runs is checked on the server's side (its call log, the repository)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bot.cli.check import run_check
from bot.policy import Policy
from tests.processes.test_cli import settings_for
from tests.scenarios.test_app import assert_history_valid, make_tools, tool_messages
from tests.support.harness import CHANNEL, running_bot, texts
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

DEMO = str(Path(__file__).parent.parent / "mcp_servers" / "demo_server.py")
BOB = "U0BOB"


def demo_policy(log: Path, extra: str = "", **env: str) -> Policy:
    """The demo server as `demo`, its call log at `log`; `extra` is more policy TOML."""
    env_items = {"DEMO_CALL_LOG": str(log), **env}
    return Policy.from_toml(
        f"""
[mcp_servers.demo]
command = {json.dumps(sys.executable)}
args = [{json.dumps(DEMO)}]
env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in env_items.items())} }}
{extra}
""",
        source="mcp-test.toml",
    )


def calls_in(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def card_text(card: dict[str, Any]) -> str:
    return json.dumps(card["params"]["blocks"], ensure_ascii=False)


async def test_a_write_call_waits_and_runs_once_after_approve(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=demo_policy(log)) as bot:
        bot.llm.reply_tool_calls([("call_1", "demo__record", {"note": "deploy-42"})])
        bot.llm.reply_text("Recorded.")
        await bot.mention("record the deploy")
        [card] = await bot.wait_cards(1)
        assert calls_in(log) == []  # nothing reached the server before the decision
        shown = card_text(card)
        assert "`demo__record` wants to run" in shown
        assert "MCP server `demo`, tool `record`" in shown
        assert "may be destructive (not annotated)" in shown

        assert (await bot.click("opsgate_approve", card["ledger_id"], user=BOB)).status_code == 200
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        # A second click on the decided card runs nothing again.
        await bot.click("opsgate_approve", card["ledger_id"], user="U0CAROL")
        await bot.settle()

        assert calls_in(log) == ["deploy-42"]
        second = bot.llm.requests[1]
        assert_history_valid(second)
        assert [m["content"] for m in tool_messages(second)] == ["recorded deploy-42"]
        assert len(bot.llm.requests) == 2
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done" and row.decided_by == BOB
        gates = [a for a in await bot.deps.store.audit_rows() if a.event == "gate"]
        assert [g.details["rule"] for g in gates] == [
            "mcp_servers.demo: approval = annotations (not annotated read-only)"
        ]


async def test_rejected_calls_never_reach_the_server(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=demo_policy(log)) as bot:
        bot.llm.reply_tool_calls(
            [
                ("call_1", "demo__record", {"note": "rejected"}),
                ("call_2", "demo__delete_release", {"release": "web-1"}),
            ]
        )
        bot.llm.reply_text("Understood.")
        await bot.mention("clean up")
        cards = await bot.wait_cards(2)
        by_tool = {
            row.tool: row for c in cards if (row := await bot.deps.store.get_call(c["ledger_id"]))
        }
        delete_card = next(c for c in cards if c["ledger_id"] == by_tool["demo__delete_release"].id)
        assert ":warning: *destructive* · MCP server `demo`, tool `delete_release`" in card_text(
            delete_card
        )
        for card in cards:
            await bot.click("opsgate_reject", card["ledger_id"], user=BOB)
            await bot.submit_reject(card["ledger_id"], "not now", user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert calls_in(log) == []
        contents = [m["content"] for m in tool_messages(bot.llm.requests[1])]
        assert len(contents) == 2 and all(c.startswith("Rejected: not now") for c in contents)


async def test_read_only_calls_run_freely_by_annotation(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=demo_policy(log)) as bot:
        bot.llm.reply_tool_calls([("call_1", "demo__status", {"service": "db"})])
        bot.llm.reply_text("db is fine.")
        await bot.mention("is the db up?")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert bot.cards() == []
        assert [m["content"] for m in tool_messages(bot.llm.requests[1])] == ["db is up"]
        assert ":white_check_mark: `demo__status`: db is up" in texts(bot.slack)
        # The model was offered the server's tools with their own schemas.
        offered = {t["function"]["name"]: t["function"] for t in bot.llm.requests[0]["tools"]}
        assert offered["demo__status"]["description"] == "Report whether a service is up."
        assert offered["demo__delete_release"]["parameters"]["required"] == ["release"]


async def test_a_crashing_server_gives_an_error_result_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    log = tmp_path / "calls.log"
    policy = demo_policy(log, '[mcp_servers.demo.tools.crash]\napproval = "never"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "demo__crash", {})])
        bot.llm.reply_tool_calls([("call_2", "demo__status", {})])
        bot.llm.reply_text("The server crashed once; it is back up.")
        await bot.mention("crash it")
        await bot.llm.wait_for_requests(3)
        await bot.settle()
        [crashed] = tool_messages(bot.llm.requests[1])
        assert "MCP server 'demo' stopped during the call of 'crash'" in crashed["content"]
        assert "outcome is unknown" in crashed["content"]
        assert [m["content"] for m in tool_messages(bot.llm.requests[2])][-1] == "web is up"
        shown = "\n".join(texts(bot.slack))
        assert ":x: `demo__crash`: Error: MCP server 'demo' stopped during the call" in shown
        assert "The server crashed once; it is back up." in shown.replace("\n", "")
        session = await bot.deps.store.find_session("T0TEST", CHANNEL, "1700000001.000100")
        assert session is not None and session.state == "idle"


async def test_an_interrupted_call_is_never_sent_again(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    started = tmp_path / "started.fifo"
    os.mkfifo(started)
    policy = demo_policy(
        log,
        '[mcp_servers.demo.tools.record_and_wait]\napproval = "never"\n',
        DEMO_STARTED=str(started),
    )

    def wait_started() -> str:
        with open(started, encoding="utf-8") as fifo:
            return fifo.readline()

    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        llm.reply_tool_calls([("call_1", "demo__record_and_wait", {"note": "once"})])
        async with running_bot(tmp_path, policy=policy, llm=llm, slack=slack) as bot:
            await bot.mention("deploy")
            assert await asyncio.wait_for(asyncio.to_thread(wait_started), 20) == "started\n"
        # The bot (and its MCP server) stopped while the call was executing. Start again.
        async with running_bot(tmp_path, policy=policy, llm=llm, slack=slack) as bot:
            await bot.settle()
            assert "outcome is unknown" in "\n".join(texts(slack))
            llm.reply_text("I will not redeploy blindly.")
            await bot.mention("what happened?", thread_ts="1700000001.000100", ts="1700000002.1")
            await llm.wait_for_requests(2)
            await bot.settle()
            [result] = tool_messages(llm.requests[1])
            assert result["content"].startswith("Interrupted:")
    assert calls_in(log) == ["once"]


async def test_channel_lists_name_one_tool_or_a_whole_server(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    policy = demo_policy(
        log,
        f'[channels_policy.{CHANNEL}]\ntools = ["echo", "demo__status"]\n'
        '[channels_policy.C0ALL]\ntools = ["demo__*"]\n',
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_text("one")
        bot.llm.reply_text("two")
        await bot.mention("tools?")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        await bot.mention("tools?", channel="C0ALL")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        names = [[t["function"]["name"] for t in r["tools"]] for r in bot.llm.requests]
        assert names[0] == ["echo", "demo__status"]
        assert names[1][:3] == ["demo__status", "demo__delete_release", "demo__environment"]
        assert all(name.startswith("demo__") for name in names[1]) and len(names[1]) == 10


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


async def test_the_published_git_server_commits_once_after_approval(tmp_path: Path) -> None:
    repo = tmp_path / "ops-repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "ops@example.com")
    git(repo, "config", "user.name", "Ops")
    (repo / "runbook.md").write_text("restart the web tier\n", encoding="utf-8")
    git(repo, "add", "runbook.md")
    policy = Policy.from_toml(
        f"""
[mcp_servers.git]
command = {json.dumps(sys.executable)}
args = ["-m", "mcp_server_git", "--repository", {json.dumps(str(repo))}]
""",
        source="git-test.toml",
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "git__git_status", {"repo_path": str(repo)})])
        bot.llm.reply_tool_calls(
            [("call_2", "git__git_commit", {"repo_path": str(repo), "message": "Add runbook"})]
        )
        bot.llm.reply_text("Committed.")
        await bot.mention("commit the runbook")
        [card] = await bot.wait_cards(1)
        # git_status is annotated read-only: it ran without a card.
        assert "runbook.md" in tool_messages(bot.llm.requests[1])[-1]["content"]
        assert "MCP server `git`, tool `git_commit`" in card_text(card)
        assert git(repo, "log", "--oneline", "--all") == ""  # nothing committed yet
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(3)
        await bot.settle()
        assert git(repo, "log", "--format=%s").splitlines() == ["Add runbook"]
        assert "Changes committed successfully" in tool_messages(bot.llm.requests[2])[-1]["content"]


async def test_check_starts_each_server_and_lists_its_tools(tmp_path: Path) -> None:
    policy = tmp_path / "opsgate.toml"
    policy.write_text(
        f"""
[mcp_servers.demo]
command = {json.dumps(sys.executable)}
args = [{json.dumps(DEMO)}]

[mcp_servers.gone]
command = "/nonexistent/mcp-server"

[channels_policy.C0OPS]
tools = ["demo__status", "gone__restart"]
""",
        encoding="utf-8",
    )
    async with LLMStandIn() as llm, SlackAPIStandIn(token="xoxb-test-token") as slack:
        settings = settings_for(tmp_path, llm.base_url, slack.url).model_copy(
            update={"opsgate_policy": policy}
        )
        out = io.StringIO()
        assert await run_check(out=out, settings=settings) == 1
    lines = out.getvalue().splitlines()
    assert "ok   MCP server 'demo': ok: 10 tools (status, delete_release, environment, " in (
        "\n".join(lines)
    )
    assert "FAIL MCP server 'gone': command '/nonexistent/mcp-server' not found" in lines
    # The server that did not start is reported once, not again as unknown tools.
    [policy_line] = [line for line in lines if "policy:" in line]
    assert policy_line.startswith("ok   policy: ") and "demo__status" in policy_line
