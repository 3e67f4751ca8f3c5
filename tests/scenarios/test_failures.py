"""Slack and clocks misbehaving: the bot says what happened, and no thread is left stuck."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bot.policy import Policy
from bot.slack.ids import CARD_EVENT
from bot.store import DatabaseLocked
from tests.scenarios.test_app import BOB, all_text, make_tools, tool_messages
from tests.scenarios.test_policy import Clock
from tests.support.harness import CHANNEL, TEAM, running_bot
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

ROOT_TS = "1700000001.000100"


async def test_settle_waits_for_the_listener_and_the_run_it_starts(tmp_path: Path) -> None:
    """The harness's `settle` is what 'nothing happened' tests rely on: prove it waits."""
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("settled")
        await bot.mention("hello")
        await bot.settle()  # no wait_for_requests: settle alone must cover the whole run
        assert len(bot.llm.requests) == 1
        session = await bot.deps.store.find_session(TEAM, CHANNEL, ROOT_TS)
        assert session is not None and session.state == "idle"


async def test_a_card_slack_refused_is_explained_and_posted_again_after_restart(
    tmp_path: Path,
) -> None:
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        tools = make_tools(tmp_path)
        llm.reply_tool_calls([("call_1", "run_command", {"command": "echo second-chance"})])
        async with running_bot(tmp_path, tools=tools, llm=llm, slack=slack) as bot:
            bot.service.cards.retries.delays = ()  # the restart, not a background try, posts it
            slack.fail_next("chat.postMessage", error="internal_error")
            await bot.mention("run it")
            await bot.settle()
            assert bot.cards() == []
            assert "couldn't post the approval card" in all_text(bot)
            session = await bot.deps.store.find_session(TEAM, CHANNEL, ROOT_TS)
            assert session is not None and session.state == "awaiting_approval"
        llm.reply_text("Ran after the card came back.")
        async with running_bot(tmp_path, tools=tools, llm=llm, slack=slack) as bot:
            [card] = await bot.wait_cards(1)
            await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
            await llm.wait_for_requests(2)
            await bot.settle()
            [result] = tool_messages(llm.requests[1])
            assert "second-chance" in result["content"]


async def test_slack_failing_while_finishing_an_answer_does_not_wedge_the_thread(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.slack.set_streaming_supported(False)
        bot.slack.fail_next("chat.update", error="internal_error", times=2)
        bot.llm.reply_text("An answer whose final edit fails twice.", chunk_size=4)
        await bot.mention("first")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        session = await bot.deps.store.find_session(TEAM, CHANNEL, ROOT_TS)
        assert session is not None and session.state in ("idle", "failed")

        bot.llm.reply_text("The thread still works.")
        await bot.mention("second", thread_ts=ROOT_TS, ts="1700000002.000100")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert "The thread still works." in all_text(bot)


async def test_a_click_after_the_deadline_expires_the_call_and_resumes(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml('[defaults]\nttl = "15m"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo too-late"})])
        bot.llm.reply_text("That request expired.")
        await bot.mention("slow decision")
        [card] = await bot.wait_cards(1)
        clock.now += timedelta(minutes=20)  # past the deadline; the sweeper has not run
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert result["content"].startswith("Expired:")
        assert "too-late" not in "".join(m["content"] for m in tool_messages(bot.llm.requests[1]))
        redrawn = bot.slack.calls_to("chat.update")[-1].params
        assert not any(b["type"] == "actions" for b in redrawn["blocks"])


async def test_a_long_answer_without_streaming_continues_in_new_messages(tmp_path: Path) -> None:
    answer = " ".join(f"word{i}" for i in range(1500))  # about 12,000 characters
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.slack.set_streaming_supported(False)
        bot.llm.reply_text(answer, chunk_size=500)
        await bot.mention("long one")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        posted = [
            bot.slack.message(CHANNEL, c.response["ts"])
            for c in bot.slack.calls_to("chat.postMessage")
            # not a card (an answer posted whole carries a mark of its own)
            if c.ok and (c.params.get("metadata") or {}).get("event_type") != CARD_EVENT
        ]
        texts = [m["text"] for m in posted if m is not None]
        assert len(texts) >= 3
        assert all(len(t) <= 4000 for t in texts)
        assert " ".join(t.strip() for t in texts).split() == answer.split()


async def test_a_second_bot_on_the_same_database_is_refused(tmp_path: Path) -> None:
    """Two processes would each 'recover' the other's running calls: the second must not start."""
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        with pytest.raises(DatabaseLocked, match="another OpsGate process"):
            async with running_bot(
                tmp_path, tools=make_tools(tmp_path), llm=bot.llm, slack=bot.slack
            ):
                pytest.fail("a second bot started on the same database")
    async with running_bot(tmp_path, tools=make_tools(tmp_path)):
        pass  # free again once the first has stopped


async def test_a_batch_decided_just_before_a_crash_resumes_at_start_up(tmp_path: Path) -> None:
    """The last decision was committed but the process died before claiming the resume."""
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        tools = make_tools(tmp_path)
        llm.reply_tool_calls([("call_1", "run_command", {"command": "echo decided-before-crash"})])
        async with running_bot(tmp_path, tools=tools, llm=llm, slack=slack) as bot:
            await bot.mention("run it")
            [card] = await bot.wait_cards(1)
            # The decision lands in the store, and nothing else happens (the "crash").
            outcome = await bot.deps.store.decide(card["ledger_id"], "approved", user_id=BOB)
            assert outcome.recorded
        assert len(llm.requests) == 1
        llm.reply_text("Resumed after the restart.")
        async with running_bot(tmp_path, tools=tools, llm=llm, slack=slack) as bot:
            await llm.wait_for_requests(2)
            await bot.settle()
            [result] = tool_messages(llm.requests[1])
            assert "decided-before-crash" in result["content"]
