"""`opsgate_tool_seconds{tool,outcome}` through the real app: every outcome is recorded where it
happens (a run that ran the tool, a decision, a cancel, a restart), over loopback HTTP."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from agent_core import ToolError, tool
from bot.policy import Policy
from bot.slack.ids import ACTION_APPROVE
from bot.tools import make_run_command
from tests.scenarios.test_app import ALICE, BOB, make_tools, tool_messages
from tests.scenarios.test_cancel import POLICY, paused
from tests.scenarios.test_policy import Clock
from tests.support.harness import Bot, running_bot
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn


def tool_counts(bot: Bot) -> dict[tuple[str, str], float]:
    text = bot.metrics.render().decode()
    return {
        (s.labels["tool"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "opsgate_tool_seconds_count" and s.value
    }


async def test_a_run_command_past_its_timeout_is_a_timeout_not_an_error(tmp_path: Path) -> None:
    tools = [make_run_command(workdir=tmp_path, timeout=0.5)]
    async with running_bot(tmp_path, tools=tools) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "sleep 30"})])
        bot.llm.reply_text("It timed out.")
        await bot.mention("run it", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.click(ACTION_APPROVE, card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert result["content"].startswith("Error: timed out after 0.5s")
        assert tool_counts(bot) == {("run_command", "timeout"): 1}


async def test_a_tool_that_answers_is_ok_and_one_that_fails_is_an_error(tmp_path: Path) -> None:
    @tool
    def echo(text: str) -> str:
        """Repeat the text back."""
        return text

    @tool
    def broken() -> str:
        """Always fails."""
        raise ToolError("the backend is down")

    async with running_bot(tmp_path, tools=[echo, broken]) as bot:
        bot.llm.reply_tool_calls([("call_1", "echo", {"text": "hi"}), ("call_2", "broken", {})])
        bot.llm.reply_text("One of two.")
        await bot.mention("try both", user=ALICE)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert tool_counts(bot) == {("echo", "ok"): 1, ("broken", "error"): 1}


async def test_a_call_left_undecided_is_expired(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml('[defaults]\nttl = "15m"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo never"})])
        bot.llm.reply_text("It expired.")
        await bot.mention("expire me", user=ALICE)
        await bot.wait_cards(1)
        clock.now += timedelta(minutes=16)
        assert await bot.service.expire_due() == 1
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert tool_counts(bot) == {("run_command", "expired"): 1}


async def test_a_paused_run_cancelled_counts_each_call_it_answered_as_cancelled(
    tmp_path: Path,
) -> None:
    async with running_bot(
        tmp_path, tools=make_tools(tmp_path), policy=Policy.from_toml(POLICY)
    ) as bot:
        root, _ = await paused(bot)
        await bot.message("Cancel", user=ALICE, thread_ts=root)
        await bot.settle()
        assert tool_counts(bot) == {("run_command", "cancelled"): 2, ("echo", "cancelled"): 1}


async def test_a_call_cut_short_by_a_restart_is_interrupted(tmp_path: Path) -> None:
    started = asyncio.Event()

    @tool
    async def slow_deploy() -> str:
        """Deploy slowly."""
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        llm.reply_tool_calls([("call_1", "slow_deploy", {})])
        async with running_bot(tmp_path, tools=[slow_deploy], llm=llm, slack=slack) as bot:
            await bot.mention("deploy", user=ALICE)
            await asyncio.wait_for(started.wait(), 10)
        async with running_bot(tmp_path, tools=[slow_deploy], llm=llm, slack=slack) as bot:
            await bot.settle()
            llm.reply_text("I will not redeploy blindly.")
            await bot.mention("what happened?", thread_ts="1700000001.000100", ts="1700000002.1")
            await llm.wait_for_requests(2)
            await bot.settle()
            [result] = tool_messages(llm.requests[1])
            assert result["content"].startswith("Interrupted:")
            assert tool_counts(bot) == {("slow_deploy", "interrupted"): 1}
