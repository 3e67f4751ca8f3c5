"""Policy, expiry, progress and recovery through the real app over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent_core import tool
from bot.policy import Policy
from tests.scenarios.test_app import ALICE, BOB, CAROL, all_text, make_tools, tool_messages
from tests.support.harness import CHANNEL, running_bot, texts
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

DAVE = "U0DAVE"


class Clock:
    """A clock the test moves by hand: expiry without sleeping."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_two_person_rule_needs_two_distinct_approvers(tmp_path: Path) -> None:
    policy = Policy.from_toml(
        f"""
        [defaults]
        approvers = ["{BOB}", "{CAROL}", "{DAVE}"]
        required_approvals = 2
        """
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo two-person"})])
        bot.llm.reply_text("Ran with two approvals.")
        await bot.mention("needs two", user=ALICE)
        [card] = await bot.wait_cards(1)
        assert "0 of 2" in json.dumps(card["params"]["blocks"]) or "2 approvals" in json.dumps(
            card["params"]["blocks"]
        )

        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.settle()
        assert len(bot.llm.requests) == 1, "one approval of two must not resume"
        progress = bot.slack.calls_to("chat.update")[-1].params
        assert "1 of 2" in json.dumps(progress["blocks"])
        assert any(b["type"] == "actions" for b in progress["blocks"])  # buttons still there

        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)  # same person again
        await bot.settle()
        assert len(bot.llm.requests) == 1
        assert "already approved" in str(bot.slack.calls_to("chat.postEphemeral")[-1].params)

        await bot.click("opsgate_approve", card["ledger_id"], user=CAROL)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert "two-person" in result["content"]
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and set(row.approvals) == {BOB, CAROL}


async def test_user_group_approver_and_outsider(tmp_path: Path) -> None:
    policy = Policy.from_toml('[defaults]\napprovers = ["S0ONCALL"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.slack.set_usergroup_members("S0ONCALL", [DAVE])
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo group"})])
        bot.llm.reply_text("Group approved.")
        await bot.mention("group please", user=ALICE)
        [card] = await bot.wait_cards(1)

        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.settle()
        [refusal] = bot.slack.calls_to("chat.postEphemeral")
        assert refusal.params["user"] == BOB
        assert "<!subteam^S0ONCALL>" in str(refusal.params["text"])
        audit = [a for a in await bot.deps.store.audit_rows() if a.event == "refusal"]
        assert audit and "S0ONCALL" not in (audit[-1].actor or "")
        assert "approvers" in json.dumps(audit[-1].details)

        await bot.click("opsgate_approve", card["ledger_id"], user=DAVE)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert bot.slack.calls_to("usergroups.users.list")


async def test_undecided_call_expires_and_the_model_is_told(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml('[defaults]\nttl = "15m"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo never"})])
        bot.llm.reply_text("It expired, so I did nothing.")
        await bot.mention("expire me")
        [card] = await bot.wait_cards(1)

        clock.now += timedelta(minutes=14)
        assert await bot.service.expire_due() == 0
        clock.now += timedelta(minutes=2)
        assert await bot.service.expire_due() == 1
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert result["content"] == "Expired: no decision within 15m; the call was not run"
        redrawn = bot.slack.calls_to("chat.update")[-1].params
        assert not any(b["type"] == "actions" for b in redrawn["blocks"])
        assert "xpired" in json.dumps(redrawn["blocks"])
        # A click after expiry changes nothing.
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.settle()
        assert len(bot.llm.requests) == 2
        assert any(a.event == "expiry" for a in await bot.deps.store.audit_rows())


async def test_channel_outside_policy_gets_a_polite_refusal(tmp_path: Path) -> None:
    policy = Policy.from_toml('[defaults]\nchannels = ["C0ELSEWHERE"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        await bot.mention("hello?")
        await bot.settle()
        assert bot.llm.requests == []
        assert "not set up to act in this channel" in all_text(bot)


async def test_answer_falls_back_to_edited_message_without_streaming(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.slack.set_streaming_supported(False)
        bot.llm.reply_text("A fallback answer, posted and then edited.", chunk_size=4)
        await bot.mention("no streaming here")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        posted = [
            c for c in bot.slack.calls_to("chat.postMessage") if c.ok and "blocks" not in c.params
        ]
        assert posted
        ts = posted[0].response["ts"]
        final = bot.slack.message(CHANNEL, ts)
        assert final is not None and final["text"] == "A fallback answer, posted and then edited."
        # Edited at most about once a second: far fewer edits than chunks.
        assert len(bot.slack.calls_to("chat.update")) <= 2


async def test_ungated_tool_progress_and_long_output_as_file(tmp_path: Path) -> None:
    @tool
    def big_report() -> str:
        """Produce a long report."""
        return "\n".join(f"line {i}: <b>&" for i in range(400))

    async with running_bot(tmp_path, tools=[*make_tools(tmp_path), big_report]) as bot:
        bot.llm.reply_tool_calls([("call_1", "big_report", {})])
        bot.llm.reply_text("Report attached.")
        await bot.mention("report")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert bot.deps.store is not None
        text = all_text(bot)
        assert "`big_report`" in text
        assert "<b>" not in text and "&lt;b&gt;" in text  # tool output is escaped
        files = bot.slack.uploaded_files
        assert files and "line 399" in str(files[-1])


async def test_restart_mid_tool_tells_the_thread_and_never_reruns(tmp_path: Path) -> None:
    started = asyncio.Event()
    runs = []

    @tool
    async def slow_deploy() -> str:
        """Deploy slowly."""
        runs.append(1)
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        tools = [*make_tools(tmp_path), slow_deploy]
        llm.reply_tool_calls([("call_1", "slow_deploy", {})])
        async with running_bot(tmp_path, tools=tools, llm=llm, slack=slack) as bot:
            await bot.mention("deploy")
            await asyncio.wait_for(started.wait(), 10)
        # The bot died while slow_deploy was executing. Start it again on the same file.
        async with running_bot(tmp_path, tools=tools, llm=llm, slack=slack) as bot:
            await bot.settle()
            assert "outcome is unknown" in "\n".join(texts(slack))
            llm.reply_text("I will not redeploy blindly.")
            await bot.mention("what happened?", thread_ts="1700000001.000100", ts="1700000002.1")
            await llm.wait_for_requests(2)
            await bot.settle()
            [result] = tool_messages(llm.requests[1])
            assert result["content"].startswith("Interrupted:")
        assert runs == [1]


async def test_a_reminder_goes_out_once_before_expiry(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml('[defaults]\nttl = "15m"\nremind_before = "5m"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo later"})])
        await bot.mention("remind me")
        await bot.wait_cards(1)

        def reminders() -> list[str]:
            return [t for t in all_text(bot).splitlines() if "still waits for a decision" in t]

        clock.now += timedelta(minutes=9)
        await bot.service.expire_due()
        await bot.settle()  # the reminder goes out through the outbox
        assert reminders() == []
        clock.now += timedelta(minutes=2)  # 4 minutes left
        await bot.service.expire_due()
        await bot.settle()  # the reminder goes out through the outbox
        assert len(reminders()) == 1 and "`run_command`" in reminders()[0]
        clock.now += timedelta(minutes=1)
        await bot.service.expire_due()
        await bot.settle()  # the reminder goes out through the outbox
        assert len(reminders()) == 1  # once only
        assert [a.event for a in await bot.deps.store.audit_rows()].count("reminder") == 1
        assert len(bot.llm.requests) == 1  # a reminder resumes nothing
