"""Channel-based ops automation through the real app over loopback HTTP: channels that act on
every message, allow-listed alert bots, the per-channel run queue (bursts, restarts), and each
channel's own tools and instructions reaching the model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bot.policy import Policy
from bot.store import SQLiteStore
from bot.wiring import INSTRUCTIONS
from tests.scenarios.test_app import ALICE, BOB, CAROL, all_text, assert_history_valid, make_tools
from tests.support.harness import CHANNEL, TEAM, HeldReplies, running_bot, texts
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

ALERTS = "C0ALERTS"
ALERT_BOT = "B0ALERTS"
ALERT_APP = "A0ALERTAPP"
OTHER_BOT = "B0OTHER"


def alert_policy(*, concurrency: int | None = None, extra: str = "") -> Policy:
    limit = f"concurrency = {concurrency}\n" if concurrency is not None else ""
    return Policy.from_toml(
        f"""
        [defaults]
        approvers = ["{BOB}"]

        [channels_policy.{ALERTS}]
        trigger = "every_message"
        allowed_bots = ["{ALERT_BOT}", "{ALERT_APP}", "BBOT"]
        approvers = ["{CAROL}"]
        {limit}{extra}
        """
    )


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


def system_texts(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request["messages"] if m["role"] == "system"]


async def test_alert_bot_message_starts_a_run_and_a_channel_approver_approves(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=alert_policy()) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo restarted-web-1"})])
        bot.llm.reply_text("Restarted web-1; CPU is back to normal.")
        root = await bot.message("FIRING: CPU above 95% on web-1", bot_id=ALERT_BOT, channel=ALERTS)
        [card] = await bot.wait_cards(1)

        assert bot.llm.requests[0]["messages"][-1] == {
            "role": "user",
            "content": "FIRING: CPU above 95% on web-1",
        }
        session = await bot.deps.store.find_session("T0TEST", ALERTS, root)
        assert session is not None and session.requester == ALERT_BOT
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.requested_by == ALERT_BOT
        assert card["params"]["thread_ts"] == root
        assert "integration `B0ALERTS`" in json.dumps(card["params"]["blocks"])

        # The defaults' approver is not this channel's: refused, nothing resumes.
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB, channel=ALERTS)
        await bot.settle()
        assert len(bot.llm.requests) == 1
        [refusal] = bot.slack.calls_to("chat.postEphemeral")
        assert refusal.params["user"] == BOB and f"<@{CAROL}>" in str(refusal.params["text"])

        await bot.click("opsgate_approve", card["ledger_id"], user=CAROL, channel=ALERTS)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert_history_valid(bot.llm.requests[1])
        [result] = [m for m in bot.llm.requests[1]["messages"] if m["role"] == "tool"]
        assert "restarted-web-1" in result["content"]
        assert "Restarted web-1; CPU is back to normal." in all_text(bot).replace("\n", "")
        # An integration cannot be streamed to: the answer was posted into the thread.
        assert not bot.slack.calls_to("chat.startStream")
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done" and row.decided_by == CAROL


async def test_alert_in_attachments_and_webhook_style_posts_reach_the_model(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=alert_policy()) as bot:
        bot.llm.reply_text("Checked.")
        bot.llm.reply_text("Checked again.")
        attachment = {"title": "DiskFull", "text": "/var is 99% full on db-2", "fallback": "x"}
        await bot.message("", bot_id=ALERT_BOT, channel=ALERTS, attachments=[attachment])
        await bot.llm.wait_for_requests(1)
        # An incoming webhook: subtype bot_message, no user, allow-listed by its app id.
        await bot.message(
            "Deploy failed",
            bot_id="B0HOOK",
            channel=ALERTS,
            subtype="bot_message",
            without=("user",),
            bot_profile={"id": "B0HOOK", "app_id": ALERT_APP, "name": "hook"},
        )
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        contents = [r["messages"][-1]["content"] for r in bot.llm.requests]
        assert contents == ["DiskFull\n/var is 99% full on db-2", "Deploy failed"]


async def test_bots_not_allow_listed_and_our_own_messages_start_nothing(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=alert_policy()) as bot:
        await bot.message("alert from a stranger", bot_id=OTHER_BOT, channel=ALERTS)
        await bot.message(
            "webhook stranger",
            bot_id="B0HOOK2",
            channel=ALERTS,
            subtype="bot_message",
            without=("user",),
        )
        # Our own message, even though the policy lists our bot id (BBOT): never a trigger.
        await bot.message(
            "my own answer",
            user="UBOT",
            bot_id="BBOT",
            channel=ALERTS,
            bot_profile={"id": "BBOT", "app_id": "A111", "name": "opsgate"},
        )
        # The allow-listed bot, but in a channel whose policy does not list it.
        await bot.message("alert elsewhere", bot_id=ALERT_BOT, channel=CHANNEL)
        await bot.settle()
        assert bot.llm.requests == []
        sessions = [
            await bot.deps.store.find_session("T0TEST", c, t)
            for c in (ALERTS, CHANNEL)
            for t in ("1700000001.000200", "1700000002.000200", "1700000003.000200")
        ]
        assert sessions == [None] * 6
        # The same channel does react to the allow-listed bot (so the above was no accident).
        bot.llm.reply_text("On it.")
        await bot.message("real alert", bot_id=ALERT_BOT, channel=ALERTS)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert len(bot.llm.requests) == 1


async def test_every_message_channel_starts_runs_for_people_mention_channel_does_not(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=alert_policy()) as bot:
        await bot.message("just chatting", user=ALICE, channel=CHANNEL)
        await bot.settle()
        assert bot.llm.requests == []
        bot.llm.reply_text("Seen.")
        root = await bot.message("db latency is up", user=ALICE, channel=ALERTS)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        session = await bot.deps.store.find_session("T0TEST", ALERTS, root)
        assert session is not None and session.requester == ALICE
        # A reply in that thread continues it.
        bot.llm.reply_text("Still seen.")
        await bot.message("any news?", user=ALICE, channel=ALERTS, thread_ts=root)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert bot.llm.requests[1]["messages"][-1]["content"] == "any news?"


async def test_fifty_alerts_fifty_runs_never_more_than_the_limit(tmp_path: Path) -> None:
    limit, total = 3, 50
    policy = alert_policy(concurrency=limit)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        held = HeldReplies()
        held.queue(bot.llm, total)
        alerts = [f"ALERT {i:02d}: disk on host-{i}" for i in range(total)]
        await asyncio.gather(
            *(
                bot.message(text, bot_id=ALERT_BOT, channel=ALERTS, ts=f"1700100{i:03d}.000300")
                for i, text in enumerate(alerts)
            )
        )
        await bot.settle(runs=False)
        await held.wait_arrived(limit)
        store = bot.deps.store
        assert len(await store.queue_items(channel_id=ALERTS, states=["started"])) == limit
        assert len(await store.queue_items(channel_id=ALERTS, states=["queued"])) == total - limit
        assert len(held.arrived) == limit

        await held.release_in_steps(total, limit)
        await bot.settle()

        assert held.peak == limit
        assert sorted(held.arrived) == sorted(alerts)  # each alert exactly once
        assert len(bot.llm.requests) == total and bot.llm.unexpected == []
        done = await store.queue_items(channel_id=ALERTS)
        assert [i.state for i in done] == ["done"] * total
        for i in range(total):
            session = await store.find_session("T0TEST", ALERTS, f"1700100{i:03d}.000300")
            assert session is not None and session.state == "idle"
        # One "queued" notice for the burst, redrawn until the queue emptied.
        [notice] = [
            c
            for c in bot.slack.calls_to("chat.postMessage")
            if str(c.params.get("text")).startswith(":hourglass")
        ]
        drawn = bot.slack.message(ALERTS, str(notice.response["ts"]))
        assert drawn is not None and "queue of this channel is empty" in drawn["text"]
        answers = [t for t in texts(bot.slack) if t.startswith("Looked into: ALERT")]
        assert sorted(set(answers)) == sorted(f"Looked into: {a}" for a in alerts)


async def test_a_restart_mid_queue_loses_nothing_and_runs_nothing_twice(tmp_path: Path) -> None:
    """Two runs are cut with their model requests in flight: after the restart they are asked
    again from their stored messages and answered, once each, with the six that waited."""
    limit, total = 2, 8
    policy = alert_policy(concurrency=limit)
    alerts = [f"ALERT {i}: queue depth high on worker-{i}" for i in range(total)]
    roots = [f"1700200{i:03d}.000300" for i in range(total)]
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        held = HeldReplies()
        held.queue(llm, total + limit)
        async with running_bot(
            tmp_path, tools=make_tools(tmp_path), policy=policy, llm=llm, slack=slack
        ) as bot:
            for text, ts in zip(alerts, roots, strict=True):
                await bot.message(text, bot_id=ALERT_BOT, channel=ALERTS, ts=ts)
            await bot.settle(runs=False)
            await held.wait_arrived(limit)
            queued = await bot.deps.store.queue_items(states=["queued"])
            assert len(queued) == total - limit
        # The app stopped with two runs mid-answer and six waiting. Same file, new app.
        interrupted = list(held.arrived)
        held.release()  # let the abandoned model requests end
        async with running_bot(
            tmp_path, tools=make_tools(tmp_path), policy=policy, llm=llm, slack=slack
        ) as bot:
            await held.release_in_steps(total + limit, limit)
            await bot.settle()
            store = bot.deps.store
            assert await store.queue_items(states=["queued", "started"]) == []
            assert [i.state for i in await store.queue_items()] == ["done"] * total
            for root in roots:
                session = await store.find_session(TEAM, ALERTS, root)
                assert session is not None
                users = [m for m in await store.load_messages(session.id) if m.role == "user"]
                assert len(users) == 1  # asked again from the stored message, not added twice

    assert held.peak <= limit
    assert len(held.arrived) == total + limit
    assert sorted(held.arrived) == sorted([*alerts, *interrupted])
    assert not [t for t in texts(slack) if "restarted during this run" in t]
    answers = [m["text"] for m in slack.messages if m["text"].startswith("Looked into:")]
    assert sorted(answers) == sorted(f"Looked into: {a}" for a in alerts)  # each once


async def test_queue_claims_respect_the_limit_and_paused_runs_do_not_count(
    tmp_path: Path,
) -> None:
    db = tmp_path / "queue.db"
    async with SQLiteStore(db) as one, SQLiteStore(db) as two:
        sessions = [await one.get_or_create_session("T", "C1", f"1.{i}") for i in range(4)]
        for session in sessions:
            outcome = await one.enqueue(session.id, requester="U1", text="go")
            assert outcome.item is not None
        # Two stores (two connections) racing for one slot: exactly one claim.
        claims = await asyncio.gather(
            one.claim_queued("C1", limit=1), two.claim_queued("C1", limit=1)
        )
        [first] = [c for c in claims if c is not None]
        assert first.session_id == sessions[0].id  # first come, first served
        assert await one.claim_queued("C1", limit=1) is None
        # The running session pauses for approval: it no longer takes the slot.
        await pause(one, first.session_id)
        second = await two.claim_queued("C1", limit=1)
        assert second is not None and second.session_id == sessions[1].id
        # A message to a thread whose run is going waits for it; a third one is refused, as
        # is one to a thread whose message is still queued, or whose run waits for approval.
        behind = await one.enqueue(sessions[1].id, requester="U1", text="again")
        assert behind.item is not None and behind.session.state == "running"
        assert await two.claim_queued("C1", limit=5) is not None  # sessions[2], not [1]
        refused = await one.enqueue(sessions[1].id, requester="U1", text="and again")
        assert refused.item is None and refused.waiting == behind.item
        refused = await one.enqueue(sessions[3].id, requester="U1", text="again")
        assert refused.item is None and refused.waiting is not None
        refused = await one.enqueue(sessions[0].id, requester="U1", text="again")
        assert refused.item is None and refused.session.state == "awaiting_approval"
        await one.end_run(sessions[1].id)  # the run ends: its thread's message starts
        claimed = [await two.claim_queued("C1", limit=5) for _ in range(3)]
        assert [c.session_id for c in claimed if c is not None] == [
            sessions[3].id,  # its "go", queued first
            sessions[1].id,  # "again", behind the run that ended
        ]


async def test_a_run_claimed_but_not_begun_goes_back_to_the_queue_at_start_up(
    tmp_path: Path,
) -> None:
    from agent_core import ChatMessage

    async with SQLiteStore(tmp_path / "q.db") as store:
        begun = await store.get_or_create_session("T", "C1", "1.1")
        not_begun = await store.get_or_create_session("T", "C1", "1.2")
        for session in (begun, not_begun):
            await store.enqueue(session.id, requester="U1", text="hello")
        a = await store.claim_queued("C1", limit=5)
        b = await store.claim_queued("C1", limit=5)
        assert a is not None and b is not None and not (a.rerun or b.rerun)
        await store.append_messages(begun.id, [ChatMessage.user("hello")])
        # OpsGate died here: one run had stored its message, the other had not.

        requeued = await store.requeue_interrupted()
        assert [(i.id, i.history_seq) for i in requeued] == [(a.id, 0), (b.id, None)]
        for session in (begun, not_begun):
            fresh = await store.get_session(session.id)
            assert fresh is not None and fresh.state == "idle"
        assert await store.recover() == []  # nobody is told: both run
        again = [await store.claim_queued("C1", limit=5) for _ in range(2)]
        assert [(i.id, i.rerun) for i in again if i is not None] == [(a.id, True), (b.id, False)]


async def test_channel_tools_are_the_only_ones_offered_also_on_resume(tmp_path: Path) -> None:
    policy = Policy.from_toml(
        f"""
        [channels_policy.{CHANNEL}]
        tools = ["run_command"]
        instructions = "Runbooks live in /srv/runbooks; read them first."
        """
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo from-channel"})])
        bot.llm.reply_text("Done here.")
        await bot.mention("run it", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        first, resumed = bot.llm.requests
        assert tool_names(first) == ["run_command"]
        assert tool_names(resumed) == ["run_command"]  # not every tool on the resume
        [result] = [m for m in resumed["messages"] if m["role"] == "tool"]
        assert "from-channel" in result["content"]
        channel_note = "Instructions for this channel (C0OPS):\nRunbooks live in /srv/runbooks; "
        for request in (first, resumed):
            systems = system_texts(request)
            assert systems[0] == INSTRUCTIONS
            assert systems[1].startswith(channel_note)
            assert request["messages"][1]["role"] == "system"

        # Another channel: every tool, no channel instructions.
        bot.llm.reply_text("Elsewhere.")
        await bot.mention("hello", user=ALICE, channel="C0OTHER")
        await bot.llm.wait_for_requests(3)
        await bot.settle()
        assert sorted(tool_names(bot.llm.requests[2])) == ["echo", "run_command"]
        assert system_texts(bot.llm.requests[2]) == [INSTRUCTIONS]


async def test_a_tool_left_out_of_a_channel_is_never_offered_there(tmp_path: Path) -> None:
    policy = Policy.from_toml(f'[channels_policy.{ALERTS}]\ntools = ["echo"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        # The model asks for run_command anyway: it is not there, so it cannot run or gate.
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo sneaky"})])
        bot.llm.reply_text("I cannot run commands here.")
        await bot.mention("run a command", user=ALICE, channel=ALERTS)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert bot.cards() == []
        assert tool_names(bot.llm.requests[0]) == ["echo"]
        [result] = [m for m in bot.llm.requests[1]["messages"] if m["role"] == "tool"]
        assert result["content"].startswith("Error: unknown tool 'run_command'")


def test_event_author_never_ourselves_and_only_allow_listed_bots() -> None:
    from slack_bolt.context.async_context import AsyncBoltContext

    from bot.slack.listeners.messages import classify_message, event_author, message_text

    policy = alert_policy()
    context = AsyncBoltContext(bot_id="BBOT", bot_user_id="UBOT")
    body = {"api_app_id": "A111"}

    def author(**event: Any) -> str | None:
        return event_author({"channel": ALERTS, **event}, body, context, policy)

    assert author(user=ALICE) == ALICE
    assert author(user="UB1", bot_id=ALERT_BOT) == ALERT_BOT
    assert author(subtype="bot_message", bot_profile={"app_id": ALERT_APP}) == ALERT_APP
    assert author(user="UB2", bot_id=OTHER_BOT) is None
    assert author(subtype="bot_message") is None  # a bot we cannot even name
    # Ourselves, by user, bot id or app id, even though the policy lists BBOT.
    assert author(user="UBOT") is None
    assert author(bot_id="BBOT") is None
    assert author(bot_id="B0NEWID", bot_profile={"app_id": "A111"}) is None

    def kind(trigger: Any, **event: Any) -> str:
        return classify_message(
            {"ts": "1.1", "channel_type": "channel", **event}, bot_user_id="UBOT", trigger=trigger
        )

    assert kind("mention", text="hello") == "ignore"
    assert kind("every_message", text="hello") == "start"
    assert kind("mention", text="<@UBOT> hello") == "start"
    assert kind("mention", text="reply", thread_ts="1.0") == "continue"
    assert kind("every_message", text="edited", subtype="message_changed") == "ignore"
    assert kind("mention", text="dm", channel_type="im") == "start"

    event = {"text": "", "attachments": [{"fallback": "only fallback"}]}
    assert message_text(event) == "only fallback"
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "from blocks"}}]
    assert message_text({"text": "", "blocks": blocks}) == "from blocks"


def test_channel_policy_keys_parse_and_bad_ones_name_the_file_and_key(tmp_path: Path) -> None:
    import pytest

    from bot.policy import PolicyError

    path = tmp_path / "opsgate.toml"
    path.write_text(
        f"""
        [defaults]
        concurrency = 5

        [channels_policy.{ALERTS}]
        trigger = "every_message"
        allowed_bots = ["{ALERT_BOT}", "{ALERT_APP}"]
        instructions = "  Check the runbook first.  "
        tools = ["run_command"]
        concurrency = 2
        """
    )
    policy = Policy.load(path, known_tools=["run_command", "echo"])
    assert (
        policy.trigger_for(ALERTS) == "every_message" and policy.trigger_for(CHANNEL) == "mention"
    )
    assert policy.allows_bot(ALERTS, None, ALERT_APP) and not policy.allows_bot(CHANNEL, ALERT_BOT)
    assert policy.instructions_for(ALERTS) == "Check the runbook first."
    assert policy.tools_for(ALERTS) == ("run_command",) and policy.tools_for(CHANNEL) is None
    assert policy.concurrency_for(ALERTS) == 2 and policy.concurrency_for(CHANNEL) == 5
    assert Policy.default().concurrency_for(CHANNEL) == 2

    cases = {
        'trigger = "always"': f"channels_policy.{ALERTS}.trigger: Input should be 'mention'",
        'allowed_bots = ["U0ALICE"]': "allowed_bots[0]: 'U0ALICE' is not a Slack bot id",
        'allowed_bots = ["B0X", "B0X"]': "allowed_bots: lists 'B0X' more than once",
        'instructions = "   "': f"channels_policy.{ALERTS}.instructions: is empty",
        "concurrency = 0": "concurrency: Input should be greater than or equal to 1",
        'tools = ["run_comand"]': (
            f"channels_policy.{ALERTS}.tools: unknown tool 'run_comand' "
            "(did you mean 'run_command'?)"
        ),
        "trigerr = 1": f"unknown key 'channels_policy.{ALERTS}.trigerr' (did you mean 'trigger'?)",
    }
    for line, expected in cases.items():
        path.write_text(f"[channels_policy.{ALERTS}]\n{line}\n")
        with pytest.raises(PolicyError) as caught:
            Policy.load(path, known_tools=["run_command", "echo"])
        assert str(path) in str(caught.value) and expected in str(caught.value), line


async def pause(store: SQLiteStore, session_id: str) -> None:
    """The run pauses for approval of one call, through the store's own pause step."""
    from agent_core import ChatMessage, ToolApprovalRequest, call_digest
    from tests.support.scripted import call

    gated = call("call_pause", "run_command", command="uptime")
    request = ToolApprovalRequest(
        gated.id,
        gated.name,
        gated.parsed_arguments(),
        "desc",
        call_digest(gated.name, gated.parsed_arguments()),
    )
    await store.record_pause(session_id, ChatMessage.assistant(None, (gated,)), [request], [])
