"""Liveness: a run cannot hold its channel's slot for ever (per-turn and per-run deadlines),
`cancel` stops a run that is going, and a Slack call that hangs does not hold an approved
command. The real app over loopback HTTP, a real SQLite file."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_core import Tool, tool
from bot.policy import Policy
from tests.scenarios.test_app import ALICE, BOB, all_text, assert_history_valid, make_tools
from tests.support.harness import CHANNEL, Bot, cancel_values, running_bot

SERIAL = '[defaults]\nconcurrency = 1\napprovers = ["U0BOB"]\n'


async def wait_text(bot: Bot, fragment: str, timeout: float = 10) -> None:
    """Until something the bot wrote into a thread contains `fragment`."""
    await bot.slack.wait_for(
        "chat.postMessage", where=lambda c: fragment in str(c.params.get("text")), timeout=timeout
    )


async def session_state(bot: Bot, root: str) -> str:
    session = await bot.deps.store.find_session("T0TEST", CHANNEL, root)
    assert session is not None
    return session.state


async def test_a_stream_kept_alive_by_comments_ends_at_the_turn_deadline(tmp_path: Path) -> None:
    async with running_bot(
        tmp_path,
        policy=Policy.from_toml(SERIAL),
        settings={"opsgate_turn_timeout": 0.5},
    ) as bot:
        hung_up = bot.llm.reply_keepalive("Let me th")
        first = await bot.mention("a question the model never finishes")
        await bot.llm.wait_for_requests(1)
        bot.llm.reply_text("The second answer.", chunk_size=200)
        second = await bot.mention("a second question, queued behind the first")
        await wait_text(bot, "did not finish its turn within 0.5 s")
        await asyncio.wait_for(hung_up.wait(), 10)  # the stream's connection was released
        await bot.llm.wait_for_requests(2)  # the slot freed: the queued run started
        await bot.settle()
        assert "The second answer." in all_text(bot)
        assert await session_state(bot, first) == "idle"
        assert await session_state(bot, second) == "idle"
        # The thread goes on: the cut turn stored nothing a provider would refuse.
        bot.llm.reply_text("Here it is.", chunk_size=200)
        await bot.message("try again", user=ALICE, thread_ts=first)
        await bot.llm.wait_for_requests(3)
        await bot.settle()
        assert_history_valid(bot.llm.requests[2])
        assert "Here it is." in all_text(bot)


async def test_a_run_past_its_deadline_is_stopped_and_the_next_one_starts(tmp_path: Path) -> None:
    async with running_bot(
        tmp_path,
        policy=Policy.from_toml(SERIAL),
        settings={"opsgate_run_timeout": 0.5},  # the turn deadline (300 s) never fires here
    ) as bot:
        hung_up = bot.llm.reply_keepalive()
        first = await bot.mention("a run that never ends")
        await bot.llm.wait_for_requests(1)
        bot.llm.reply_text("The second answer.", chunk_size=200)
        await bot.mention("queued behind it")
        await wait_text(bot, "I stopped this run: it went on longer than")
        await asyncio.wait_for(hung_up.wait(), 10)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert "The second answer." in all_text(bot)
        assert await session_state(bot, first) == "idle"
        stops = [a for a in await bot.deps.store.audit_rows() if a.event == "run_stopped"]
        assert [a.details["why"] for a in stops] == ["deadline"]


def blocking_tool(started: asyncio.Event, runs: list[str]) -> Tool:
    @tool
    async def wait_forever(name: str) -> str:
        """Wait for something that never happens."""
        runs.append(name)
        started.set()
        await asyncio.Event().wait()
        return "never"

    return wait_forever


async def test_cancel_written_in_the_thread_stops_a_running_tool_call(tmp_path: Path) -> None:
    started, runs = asyncio.Event(), list[str]()
    tools = [*make_tools(tmp_path), blocking_tool(started, runs)]
    async with running_bot(tmp_path, tools=tools, policy=Policy.from_toml(SERIAL)) as bot:
        bot.llm.reply_tool_calls(
            [("call_w", "wait_forever", {"name": "x"}), ("call_e", "echo", {"text": "after"})]
        )
        root = await bot.mention("wait for it")
        await asyncio.wait_for(started.wait(), 10)
        # Someone who is neither the requester nor an approver cannot stop it.
        await bot.message("cancel", user="U0DAVE", thread_ts=root)
        await bot.settle(runs=False)
        assert await session_state(bot, root) == "running"
        await bot.message("cancel", user=ALICE, thread_ts=root)
        await wait_text(bot, f"Run stopped by <@{ALICE}>")
        await bot.settle()
        assert "`wait_forever` was running then" in all_text(bot)
        store = bot.deps.store
        session = await store.find_session("T0TEST", CHANNEL, root)
        assert session is not None and session.state == "idle"
        call = await store.find_call(session.id, "call_w")
        assert call is not None and call.status == "interrupted"
        answers = {m.tool_call_id: m.content for m in await store.load_messages(session.id)}
        assert answers["call_w"].startswith("Interrupted")
        assert answers["call_e"].startswith("Not run")
        assert runs == ["x"]
        refusals = [a for a in await store.audit_rows() if a.event == "refusal"]
        assert [a.actor for a in refusals] == ["U0DAVE"]
        # The next message continues with a history a provider accepts; nothing re-runs.
        bot.llm.reply_text("Stopped, as asked.", chunk_size=200)
        await bot.message("ok?", user=ALICE, thread_ts=root)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert_history_valid(bot.llm.requests[1])
        assert runs == ["x"]


async def test_the_cancel_button_stops_a_resumed_run(tmp_path: Path) -> None:
    started, runs = asyncio.Event(), list[str]()
    policy = Policy.from_toml(SERIAL + '[tools.wait_forever]\napproval = "always"\n')
    tools = [*make_tools(tmp_path), blocking_tool(started, runs)]
    async with running_bot(tmp_path, tools=tools, policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_w", "wait_forever", {"name": "y"})])
        root = await bot.mention("wait, once approved")
        [card] = await bot.wait_cards(1)
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await asyncio.wait_for(started.wait(), 10)
        [value] = cancel_values(card["params"]["blocks"])
        await bot.click("opsgate_cancel", value, user=BOB)
        await wait_text(bot, f"Run stopped by <@{BOB}>")
        await bot.settle()
        assert await session_state(bot, root) == "idle"
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "interrupted"
        assert runs == ["y"]


async def test_a_hanging_card_redraw_does_not_hold_the_approved_command(tmp_path: Path) -> None:
    async with running_bot(
        tmp_path,
        tools=make_tools(tmp_path),
        policy=Policy.from_toml('[defaults]\napprovers = ["U0BOB"]\n'),
        settings={"opsgate_slack_timeout": 60},  # far longer than the test waits
    ) as bot:
        bot.llm.reply_tool_calls([("call_a", "run_command", {"command": "echo ran-it"})])
        bot.llm.reply_text("Done.", chunk_size=200)
        await bot.mention("run it")
        [card] = await bot.wait_cards(1)
        release = bot.slack.hold("chat.update")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        # The command runs and its result is posted while every redraw hangs.
        await wait_text(bot, "ran-it")
        await bot.llm.wait_for_requests(2)
        # The card's redraw (settled a moment for the result first) hangs in Slack.
        await bot.slack.wait_until(lambda: bot.slack.holding.get("chat.update", 0) >= 1)
        assert bot.slack.calls_to("chat.update") == []  # none answered yet
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done"
        release.set()
        await bot.settle()
