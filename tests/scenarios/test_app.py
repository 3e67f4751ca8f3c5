"""The Slack bot end to end, over real loopback HTTP: signed requests into the Bolt app in HTTP
mode, a Slack Web API stand-in, an OpenAI-compatible SSE stand-in, and the real SQLite file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from agent_core import Tool, tool
from bot.tools import make_run_command
from tests.support.harness import CHANNEL, SECRET, Bot, running_bot, texts
from tests.support.slack_requests import event_body, load_fixture, sign

ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"


def make_tools(tmp_path: Path) -> list[Tool]:
    @tool
    def echo(text: str) -> str:
        """Repeat the text back."""
        return f"echo: {text}"

    return [make_run_command(workdir=tmp_path, timeout=20), echo]


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def assert_history_valid(request: dict[str, Any]) -> None:
    """What a real provider insists on: each assistant tool call answered once, right after it."""
    messages = request["messages"]
    for i, message in enumerate(messages):
        if message["role"] == "assistant" and message.get("tool_calls"):
            ids = [c["id"] for c in message["tool_calls"]]
            following = messages[i + 1 : i + 1 + len(ids)]
            assert [m.get("tool_call_id") for m in following] == ids, messages


def all_text(bot: Bot) -> str:
    return "\n".join(texts(bot.slack))


def decided_cards(bot: Bot, ledger_id: str) -> list[dict[str, Any]]:
    """chat.update calls that redrew the card of `ledger_id` without buttons."""
    out = []
    row_ts = None
    for call in bot.slack.calls_to("chat.update"):
        blocks = call.params.get("blocks") or []
        if any(b.get("type") == "actions" for b in blocks):
            continue
        if row_ts is None or call.params.get("ts") == row_ts:
            out.append(call.params)
    return out


async def test_mention_gets_a_streamed_answer(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Hello from OpsGate, all systems nominal.")
        await bot.mention("status?")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert "Hello from OpsGate, all systems nominal." in all_text(bot).replace("\n", "")
        request = bot.llm.requests[0]
        assert request["messages"][-1] == {"role": "user", "content": "status?"}
        # Progress was shown on the user's message, and taken away at the end.
        assert bot.slack.calls_to("reactions.add")
        assert bot.slack.calls_to("reactions.remove")
        session = await bot.deps.store.find_session("T0TEST", CHANNEL, "1700000001.000100")
        assert session is not None and session.state == "idle"


async def test_approve_runs_the_command_and_answers(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hello-from-shell"})])
        bot.llm.reply_text("The command printed hello-from-shell.")
        await bot.mention("run echo please")
        cards = await bot.wait_cards(1)
        assert len(bot.llm.requests) == 1
        card = cards[0]
        # The button carries an opaque id, never the command.
        assert "echo hello" not in card["ledger_id"]
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending"

        response = await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        assert response.status_code == 200
        await bot.llm.wait_for_requests(2)
        await bot.settle()

        second = bot.llm.requests[1]
        assert_history_valid(second)
        [result] = tool_messages(second)
        assert "hello-from-shell" in result["content"]
        assert "The command printed hello-from-shell." in all_text(bot).replace("\n", "")
        # The card was redrawn without buttons, naming who approved.
        redrawn = decided_cards(bot, card["ledger_id"])
        assert redrawn and any(BOB in json.dumps(c["blocks"]) for c in redrawn)
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done" and row.decided_by == BOB
        events = [a.event for a in await bot.deps.store.audit_rows()]
        assert {"request", "decision", "execution_start", "execution_end"} <= set(events)


async def test_reject_with_reason_reaches_the_model(tmp_path: Path) -> None:
    marker = tmp_path / "must-not-exist"
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": f"touch {marker}"})])
        bot.llm.reply_text("Understood, I will not touch it.")
        await bot.mention("touch the file")
        [card] = await bot.wait_cards(1)

        response = await bot.click("opsgate_reject", card["ledger_id"], user=BOB)
        assert response.status_code == 200
        opened = await bot.slack.wait_for("views.open")
        view = opened[0].params["view"]
        if isinstance(view, str):
            view = json.loads(view)
        assert view["private_metadata"] == card["ledger_id"]

        response = await bot.submit_reject(card["ledger_id"], "not during the freeze", user=BOB)
        assert response.status_code == 200
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert result["content"] == f"Rejected: not during the freeze (rejected by <@{BOB}>)"
        assert not marker.exists()
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert (
            row is not None and row.status == "rejected" and row.reason == "not during the freeze"
        )


async def test_mixed_batch_runs_sibling_after_decision(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls(
            [
                ("call_a", "echo", {"text": "sibling"}),
                ("call_b", "run_command", {"command": "echo gated"}),
            ]
        )
        bot.llm.reply_text("Both done.")
        await bot.mention("do both")
        [card] = await bot.wait_cards(1)  # one card: only the gated call
        # The card lists the sibling that runs once the batch is decided.
        assert "echo" in json.dumps(card["params"]["blocks"])
        assert len(bot.llm.requests) == 1
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        second = bot.llm.requests[1]
        assert_history_valid(second)
        results = tool_messages(second)
        assert [m["tool_call_id"] for m in results] == ["call_a", "call_b"]
        assert results[0]["content"] == "echo: sibling"
        assert "gated" in results[1]["content"]


@pytest.mark.parametrize("order", [("first", "second"), ("second", "first")])
async def test_two_gated_calls_resume_only_after_both(
    tmp_path: Path, order: tuple[str, str]
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls(
            [
                ("call_1", "run_command", {"command": "echo first"}),
                ("call_2", "run_command", {"command": "echo second"}),
            ]
        )
        bot.llm.reply_text("All decided.")
        await bot.mention("two things")
        cards = await bot.wait_cards(2)
        by_command = {}
        for card in cards:
            row = await bot.deps.store.get_call(card["ledger_id"])
            assert row is not None
            by_command[json.loads(row.arguments)["command"].split()[-1]] = card["ledger_id"]

        await bot.click("opsgate_approve", by_command[order[0]], user=BOB)
        await bot.settle()
        assert len(bot.llm.requests) == 1, "resumed before every call was decided"
        session = await bot.deps.store.find_session("T0TEST", CHANNEL, "1700000001.000100")
        assert session is not None and session.state == "awaiting_approval"

        await bot.click("opsgate_reject", by_command[order[1]], user=CAROL)
        await bot.submit_reject(by_command[order[1]], None, user=CAROL)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        results = tool_messages(bot.llm.requests[1])
        assert [m["tool_call_id"] for m in results] == ["call_1", "call_2"]
        by_id = {m["tool_call_id"]: m["content"] for m in results}
        rejected = "call_2" if order[1] == "second" else "call_1"
        assert by_id[rejected].startswith("Rejected: User denied")


async def test_double_click_and_racing_approvers_decide_once(tmp_path: Path) -> None:
    import asyncio

    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo once >> runs.txt"})])
        bot.llm.reply_text("Done once.")
        await bot.mention("append once")
        [card] = await bot.wait_cards(1)
        responses = await asyncio.gather(
            bot.click("opsgate_approve", card["ledger_id"], user=BOB),
            bot.click("opsgate_approve", card["ledger_id"], user=CAROL),
            bot.click("opsgate_approve", card["ledger_id"], user=BOB),
        )
        assert all(r.status_code == 200 for r in responses)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert (tmp_path / "runs.txt").read_text().count("once") == 1
        assert len(bot.llm.requests) == 2
        decisions = [a for a in await bot.deps.store.audit_rows() if a.event == "decision"]
        assert len(decisions) == 1
        # The losers were told who decided, privately.
        ephemeral = bot.slack.calls_to("chat.postEphemeral")
        assert len(ephemeral) == 2
        winner = decisions[0].actor
        assert all(winner in str(c.params.get("text")) for c in ephemeral)


async def test_requester_cannot_approve_own_call(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo mine"})])
        await bot.mention("run it", user=ALICE)
        [card] = await bot.wait_cards(1)
        response = await bot.click("opsgate_approve", card["ledger_id"], user=ALICE)
        assert response.status_code == 200
        await bot.settle()
        [ephemeral] = bot.slack.calls_to("chat.postEphemeral")
        assert ephemeral.params["user"] == ALICE
        assert "allow_self_approval" in str(ephemeral.params["text"])
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending"
        assert len(bot.llm.requests) == 1
        refusals = [a for a in await bot.deps.store.audit_rows() if a.event == "refusal"]
        assert refusals and refusals[0].actor == ALICE


async def test_unknown_button_value_changes_nothing(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        response = await bot.click("opsgate_approve", "no-such-id", user=BOB)
        assert response.status_code == 200
        await bot.settle()
        [ephemeral] = bot.slack.calls_to("chat.postEphemeral")
        assert "don't know" in str(ephemeral.params["text"])
        assert bot.llm.requests == []


async def test_retried_event_starts_one_run(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Only once.")
        payload = load_fixture("event_callback_app_mention.json")
        first = await bot.event(payload)
        retry = await bot.event(
            payload, **{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
        )
        assert first.status_code == retry.status_code == 200
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert len(bot.llm.requests) == 1
        assert bot.llm.unexpected == []


async def test_mention_also_delivered_as_message_starts_one_run(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Once.")
        payload = load_fixture("event_callback_app_mention.json")
        as_message = json.loads(json.dumps(payload))
        as_message["event"]["type"] = "message"
        as_message["event"]["channel_type"] = "channel"
        as_message["event_id"] = "Ev-as-message"
        await bot.event(payload)
        await bot.event(as_message)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert len(bot.llm.requests) == 1


async def test_mention_in_a_thread_not_ours_starts_a_run_when_its_message_event_comes_first(
    tmp_path: Path,
) -> None:
    """The `message` delivery of a mention in someone else's thread is ignored; it must not use
    up the message, or the `app_mention` delivery that follows would be dropped as a repeat."""
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Joined the thread.")
        root, reply_ts = "1699999999.000100", "1700000050.000100"
        await bot.message("<@UBOT> can you look?", thread_ts=root, ts=reply_ts)
        await bot.settle()
        assert bot.llm.requests == []
        await bot.mention("can you look?", thread_ts=root, ts=reply_ts)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        [request] = bot.llm.requests
        assert request["messages"][-1] == {"role": "user", "content": "can you look?"}


@pytest.mark.parametrize("problem", ["unsigned", "stale", "wrong-secret"])
async def test_forged_requests_get_401_and_do_nothing(tmp_path: Path, problem: str) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        body = event_body(load_fixture("event_callback_app_mention.json"))
        headers = {"Content-Type": "application/json"}
        if problem == "stale":
            headers |= sign(SECRET, body, timestamp=int(time.time()) - 600)
        elif problem == "wrong-secret":
            headers |= sign("not-the-secret", body)
        response = await bot.http.post(f"{bot.url}/slack/events", content=body, headers=headers)
        assert response.status_code == 401
        await bot.settle()
        assert bot.llm.requests == []
        assert [c.method for c in bot.slack.calls if c.method != "auth.test"] == []


async def test_url_verification_and_health(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        payload = load_fixture("url_verification.json")
        response = await bot.event(payload)
        assert response.status_code == 200
        assert response.json()["challenge"] == payload["challenge"]
        health = await bot.http.get(f"{bot.url}/healthz")
        assert health.status_code == 200


async def test_bot_messages_and_unsubscribed_kinds_are_ignored_with_200(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        for name in ("message_bot_message.json", "message_channel_thread_reply.json"):
            response = await bot.event(load_fixture(name))
            assert response.status_code == 200
        other = load_fixture("event_callback_app_mention.json")
        other["event"] = {"type": "member_joined_channel", "user": ALICE, "channel": CHANNEL}
        other["event_id"] = "Ev-join"
        assert (await bot.event(other)).status_code == 200
        await bot.settle()
        assert bot.llm.requests == []


async def test_direct_message_starts_a_run(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Hi in DM.")
        payload = load_fixture("message_im_docs_example.json")
        response = await bot.event(payload)
        assert response.status_code == 200
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        event = payload["event"]
        assert bot.llm.requests[0]["messages"][-1]["content"] == event["text"]
        session = await bot.deps.store.find_session(
            payload["team_id"], event["channel"], event["ts"]
        )
        assert session is not None


async def test_message_while_awaiting_approval_points_at_cards(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo x"})])
        root = await bot.mention("first")
        await bot.wait_cards(1)
        await bot.mention("second request", thread_ts=root, ts="1700000099.000100")
        await bot.settle()
        assert len(bot.llm.requests) == 1
        assert "waiting for a decision" in all_text(bot)


async def test_restart_between_card_and_click_resumes_from_sqlite(tmp_path: Path) -> None:
    from tests.support.llm_server import LLMStandIn
    from tests.support.slack_api import SlackAPIStandIn

    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        llm.reply_tool_calls([("call_1", "run_command", {"command": "echo after-restart"})])
        async with running_bot(tmp_path, tools=make_tools(tmp_path), llm=llm, slack=slack) as bot:
            await bot.mention("run after restart")
            [card] = await bot.wait_cards(1)
        # The first app is gone. A new one opens the same SQLite file.
        llm.reply_text("Finished after the restart.")
        async with running_bot(tmp_path, tools=make_tools(tmp_path), llm=llm, slack=slack) as bot:
            response = await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
            assert response.status_code == 200
            await llm.wait_for_requests(2)
            await bot.settle()
            assert_history_valid(llm.requests[1])
            [result] = tool_messages(llm.requests[1])
            assert "after-restart" in result["content"]
            assert "Finished after the restart." in all_text(bot).replace("\n", "")


async def test_llm_failing_midstream_is_reported_and_next_message_works(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.fail_midstream("Let me chec")
        root = await bot.mention("check things")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert "couldn't finish" in all_text(bot)
        bot.llm.reply_text("Second try worked.")
        await bot.mention("again", thread_ts=root, ts="1700000050.000100")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert "Second try worked." in all_text(bot).replace("\n", "")
        assert bot.llm.requests[1]["messages"][-1]["content"] == "again"


async def test_llm_unreachable_is_reported(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_status(401, {"error": {"message": "Incorrect API key provided"}})
        await bot.mention("hello")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert "Incorrect API key provided" in all_text(bot)


async def test_slack_rate_limit_is_retried(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.slack.fail_next("chat.postMessage", status=429, retry_after=0)
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo x"})])
        await bot.mention("rate limited card")
        [card] = await bot.wait_cards(1)
        statuses = [c.status for c in bot.slack.calls_to("chat.postMessage")]
        assert 429 in statuses
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.card_ts  # the retried post is the card on record


async def test_requester_may_withdraw_own_request(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo withdrawn"})])
        bot.llm.reply_text("Withdrawn, nothing ran.")
        await bot.mention("run it", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.click("opsgate_reject", card["ledger_id"], user=ALICE)
        await bot.slack.wait_for("views.open")
        await bot.submit_reject(card["ledger_id"], "changed my mind", user=ALICE)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert result["content"].startswith("Rejected: changed my mind")


async def test_someone_from_another_organisation_cannot_approve_by_default(
    tmp_path: Path,
) -> None:
    """In a Slack Connect channel, 'anyone in the channel' must not include another org."""
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo shared"})])
        await bot.mention("run it")
        [card] = await bot.wait_cards(1)
        await bot.click("opsgate_approve", card["ledger_id"], user="U0GUEST", team="T0PARTNER")
        await bot.settle()
        [ephemeral] = bot.slack.calls_to("chat.postEphemeral")
        assert "Only members of this workspace" in str(ephemeral.params["text"])
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending"


async def test_llm_that_cannot_be_reached_is_reported_and_nothing_is_lost(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    async with running_bot(
        tmp_path, tools=make_tools(tmp_path), llm_url=f"http://127.0.0.1:{closed_port}/v1"
    ) as bot:
        root = await bot.mention("are you there?")
        await bot.settle(timeout=30)
        assert "could not connect" in all_text(bot)
        session = await bot.deps.store.find_session("T0TEST", CHANNEL, root)
        assert session is not None and session.state == "idle"
        history = await bot.deps.store.load_messages(session.id)
        assert [m.content for m in history] == ["are you there?"]


async def test_a_huge_provider_error_is_cut_before_it_is_posted(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        huge = "upstream exploded: " + "x" * 40_000
        bot.llm.reply_status(400, {"error": {"message": huge}})
        await bot.mention("hello")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        text = all_text(bot)
        assert "upstream exploded" in text and "more characters cut" in text
        assert len(text) < 3_000


async def test_tool_seconds_count_calls_that_never_ran_by_outcome(tmp_path: Path) -> None:
    """`opsgate_tool_seconds{tool,outcome}`: a rejected call is counted (at 0 s), not only the
    calls that ran."""
    from prometheus_client.parser import text_string_to_metric_families

    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo no"})])
        bot.llm.reply_text("Fine.")
        await bot.mention("run it")
        [card] = await bot.wait_cards(1)
        await bot.submit_reject(card["ledger_id"], "no", user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        text = bot.metrics.render().decode()
    counts = {
        (s.labels["tool"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "opsgate_tool_seconds_count"
    }
    assert counts == {("run_command", "rejected"): 1}
