"""`/opsgate` through the real app over loopback HTTP: a request becomes a thread and a run,
`pending` lists exactly the caller's decidable approvals, `help` explains the channel."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.policy import Policy
from tests.scenarios.test_app import ALICE, BOB, CAROL, all_text, make_tools
from tests.support.harness import CHANNEL, HeldReplies, running_bot

DAVE = "U0DAVE"
ALERTS = "C0ALERTS"
ALERT_BOT = "B0ALERTS"


def permalink(channel: str, ts: str) -> str:
    """The link the Slack stand-in's chat.getPermalink gives for a message."""
    return f"https://opsgate-test.slack.com/archives/{channel}/p{ts.replace('.', '')}"


async def test_request_posts_the_thread_root_and_runs_for_the_caller(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        held = HeldReplies(lambda text: "Checked the <web> pool.")
        held.queue(bot.llm, 1)
        response, hook = await bot.slash("check the <web> pool & report", user=ALICE)
        # Acknowledged at once: the answer came back while the run is still waiting on the model.
        assert response.status_code == 200 and response.text == ""
        await held.wait_arrived(1)
        assert held.active == 1

        [root] = [c for c in bot.slack.calls_to("chat.postMessage") if "asked:" in str(c.params)]
        assert root.params["text"] == f"<@{ALICE}> asked: check the &lt;web&gt; pool &amp; report"
        assert "thread_ts" not in root.params and root.params["channel"] == CHANNEL
        root_ts = root.response["ts"]
        assert held.arrived == ["check the <web> pool & report"]

        held.release()
        await bot.settle()
        session = await bot.deps.store.find_session("T0TEST", CHANNEL, root_ts)
        assert session is not None and session.requester == ALICE and session.state == "idle"
        answer = [
            c
            for c in bot.slack.calls
            if c.method in ("chat.startStream", "chat.postMessage")
            and c.params.get("thread_ts") == root_ts
        ]
        assert answer, "the answer went into the request's thread"
        assert "Checked the &lt;web&gt; pool." in all_text(bot)
        assert bot.slack.calls_to("response_url") == []  # nothing to tell privately
        assert hook


async def test_request_in_a_channel_outside_the_policy_is_refused_privately(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml('[defaults]\nchannels = ["C0ELSEWHERE"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        response, hook = await bot.slash("restart everything", user=ALICE)
        assert response.status_code == 200
        [answer] = await bot.hook_answers(hook)
        await bot.settle()
        assert answer["response_type"] == "ephemeral"
        assert "not set up to act in this channel" in answer["text"]
        assert bot.slack.calls_to("chat.postMessage") == []
        assert bot.llm.requests == []


async def test_pending_lists_exactly_the_callers_decidable_approvals(tmp_path: Path) -> None:
    policy = Policy.from_toml(
        f"""
        [defaults]
        approvers = ["{BOB}", "{CAROL}"]

        [channels_policy.{ALERTS}]
        trigger = "every_message"
        allowed_bots = ["{ALERT_BOT}"]
        approvers = ["{CAROL}"]
        """
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        # 1: Alice asks in the ops channel (Bob and Carol may decide).
        bot.llm.reply_tool_calls([("c1", "run_command", {"command": "echo one"})])
        await bot.mention("one", user=ALICE)
        # 2: the alert bot in the alerts channel (only Carol may decide).
        bot.llm.reply_tool_calls([("c2", "run_command", {"command": "echo two"})])
        await bot.message("disk full", bot_id=ALERT_BOT, channel=ALERTS)
        # 3: Bob asks in the ops channel (Carol may decide; Bob may not approve his own).
        bot.llm.reply_tool_calls([("c3", "run_command", {"command": "echo three"})])
        await bot.mention("three", user=BOB)
        cards = await bot.wait_cards(3)
        by_command, ledger = {}, {}
        for card in cards:
            row = await bot.deps.store.get_call(card["ledger_id"])
            assert row is not None and row.card_channel and row.card_ts
            by_command[row.arguments] = permalink(row.card_channel, row.card_ts)
            ledger[row.arguments] = row.id
        one, two, three = (
            by_command['{"command":"echo one"}'],
            by_command['{"command":"echo two"}'],
            by_command['{"command":"echo three"}'],
        )

        async def pending(user: str) -> str:
            _, hook = await bot.slash("pending", user=user)
            [answer] = await bot.hook_answers(hook)
            assert answer["response_type"] == "ephemeral"
            return str(answer["text"])

        bob, carol, dave = await asyncio.gather(pending(BOB), pending(CAROL), pending(DAVE))
        assert one in bob and two not in bob and three not in bob
        assert "(1)" in bob
        assert one in carol and two in carol and three in carol
        assert "(3)" in carol and "integration `B0ALERTS`" in carol and f"<#{ALERTS}>" in carol
        assert dave == "Nothing is waiting for your approval right now."

        # Once Bob decides the first, it is no longer his to decide.
        bot.llm.reply_text("Done.")
        await bot.click("opsgate_approve", ledger['{"command":"echo one"}'], user=BOB)
        await bot.llm.wait_for_requests(4)
        await bot.settle()
        assert await pending(BOB) == "Nothing is waiting for your approval right now."


async def test_help_explains_usage_and_the_channels_policy(tmp_path: Path) -> None:
    policy = Policy.from_toml(
        f"""
        [defaults]
        approvers = ["{BOB}"]
        ttl = "30m"
        channels = ["{CHANNEL}", "{ALERTS}"]

        [channels_policy.{ALERTS}]
        trigger = "every_message"
        allowed_bots = ["{ALERT_BOT}"]
        approvers = ["{CAROL}", "{DAVE}"]
        required_approvals = 2
        tools = ["run_command"]
        concurrency = 4
        instructions = "Alerts come from Prometheus."
        """
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        _, hook = await bot.slash("help", user=ALICE, channel=ALERTS)
        [answer] = await bot.hook_answers(hook)
        text = str(answer["text"])
        assert answer["response_type"] == "ephemeral"
        assert "`/opsgate <request>`" in text and "`/opsgate pending`" in text
        assert "`cancel`" in text
        assert f"*In <#{ALERTS}>:*" in text
        assert "every new message starts a run" in text and "`B0ALERTS`" in text
        assert f"<@{CAROL}> or <@{DAVE}>" in text and "2 approvals needed" in text
        assert "may not approve their own" in text
        assert "expire after 30m" in text
        assert "`run_command` (asks for approval)" in text and "`echo`" not in text
        assert "Up to 4 runs at once" in text
        assert "own instructions" in text

        # Nothing after the command is help too; another channel shows its own policy.
        _, hook = await bot.slash("", user=ALICE, channel=CHANNEL)
        [answer] = await bot.hook_answers(hook)
        text = str(answer["text"])
        assert "a mention of me starts a run" in text and f"<@{BOB}>" in text
        assert "`echo` (runs without approval)" in text and "Up to 2 runs" in text

        _, hook = await bot.slash("help", user=ALICE, channel="C0NOTHERE")
        [answer] = await bot.hook_answers(hook)
        assert "I don't act here" in str(answer["text"])
        await bot.settle()
        assert bot.llm.requests == []
        assert bot.slack.calls_to("chat.postMessage") == []


async def test_cancel_as_a_command_explains_where_to_cancel(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        _, hook = await bot.slash("cancel", user=ALICE)
        [answer] = await bot.hook_answers(hook)
        await bot.settle()
        assert "write `cancel` in its thread" in str(answer["text"])
        assert bot.llm.requests == [] and bot.slack.calls_to("chat.postMessage") == []
