"""Slack's agent surface, end to end: the assistant status while a run works and waits, the
feedback buttons under a final answer, and the AI-app container (suggested prompts, the channel
the user looks at, the conversation's title). Signed requests into the real Bolt app, the Slack
Web API stand-in, the LLM stand-in and the real SQLite file."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from bot.policy import Policy
from bot.slack.ids import (
    ACTION_FEEDBACK,
    ACTION_FEEDBACK_REASON,
    BLOCK_FEEDBACK_REASON,
    CALLBACK_FEEDBACK,
)
from tests.scenarios.test_app import ALICE, BOB, make_tools
from tests.support.harness import CHANNEL, TEAM, Bot, running_bot
from tests.support.slack_requests import block_actions, interaction_body, view_submission
from tests.support.store_helpers import votes

DM = "D0ALICE"
DB_CHANNEL = "C0DB"


def _statuses(bot: Bot, channel: str, thread_ts: str) -> list[str]:
    return [
        str(c.params["status"])
        for c in bot.slack.calls_to("assistant.threads.setStatus")
        if c.params.get("channel_id") == channel and c.params.get("thread_ts") == thread_ts
    ]


async def test_the_status_says_working_then_waiting_for_whom_and_is_cleared(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(f'[defaults]\napprovers = ["{BOB}"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi"})])
        bot.llm.reply_text("Done.")
        thread = await bot.mention("go", user=ALICE)
        [card] = await bot.wait_cards(1)
        assert _statuses(bot, CHANNEL, thread) == [
            "is working on it…",
            f"is waiting for approval from <@{BOB}>",
        ]
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert _statuses(bot, CHANNEL, thread)[2:] == ["is working on it…", ""]
        assert bot.slack.statuses[(CHANNEL, thread)] == ""


async def test_a_refused_status_never_blocks_the_run(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        bot.slack.fail_next("assistant.threads.setStatus", error="missing_scope", times=10)
        bot.llm.reply_text("All good.")
        thread = await bot.mention("how are we", user=ALICE)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        refused = bot.slack.calls_to("assistant.threads.setStatus")
        assert refused and not any(c.ok for c in refused)
        answer = [m for m in bot.slack.messages if m.get("thread_ts") == thread]
        assert any("All good." in m["text"] for m in answer)
        session = await bot.deps.store.find_session(TEAM, CHANNEL, thread)
        assert session is not None and session.state == "idle"


def _feedback_click(bot: Bot, value: str, *, user: str, ts: str, block_id: str) -> bytes:
    payload = block_actions(
        ACTION_FEEDBACK, value, user=user, channel=CHANNEL, message_ts=ts, block_id=block_id
    )
    return interaction_body(payload)


async def test_feedback_on_the_final_answer_is_audited_and_counted(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        bot.llm.reply_text("Disk is 40% full.")
        await bot.mention("disk?", user=ALICE)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        [stop] = [c for c in bot.slack.calls_to("chat.stopStream") if c.params.get("blocks")]
        [block] = stop.params["blocks"]
        assert block["type"] == "context_actions"
        [element] = block["elements"]
        assert element["type"] == "feedback_buttons" and element["action_id"] == ACTION_FEEDBACK
        answer_ts = str(stop.params["ts"])

        body = _feedback_click(bot, "good", user=BOB, ts=answer_ts, block_id=block["block_id"])
        assert (await bot.post(body, "application/x-www-form-urlencoded")).status_code == 200
        body = _feedback_click(bot, "bad", user=ALICE, ts=answer_ts, block_id=block["block_id"])
        assert (await bot.post(body, "application/x-www-form-urlencoded")).status_code == 200
        await bot.settle()

        rows = [r for r in await bot.deps.store.audit_rows() if r.event == "feedback"]
        assert [(r.actor, r.details["value"]) for r in rows] == [(BOB, "good"), (ALICE, "bad")]
        [session_id] = {r.session_id for r in rows}
        assert session_id is not None and block["block_id"].endswith(session_id)
        assert all(r.details["message_ts"] == answer_ts for r in rows)
        text = bot.metrics.render().decode()
        assert 'opsgate_feedback_total{value="good"} 1.0' in text
        assert 'opsgate_feedback_total{value="bad"} 1.0' in text

        # "bad" opened the optional reason modal; what it says is audited too.
        [opened] = bot.slack.calls_to("views.open")
        view = opened.params["view"]
        view = json.loads(view) if isinstance(view, str) else view
        assert view["callback_id"] == CALLBACK_FEEDBACK
        values = {BLOCK_FEEDBACK_REASON: {ACTION_FEEDBACK_REASON: "it should have said which"}}
        submit = view_submission(CALLBACK_FEEDBACK, view["private_metadata"], values, user=ALICE)
        response = await bot.post(interaction_body(submit), "application/x-www-form-urlencoded")
        assert response.status_code == 200
        await bot.settle()
        [reason] = [r for r in await bot.deps.store.audit_rows() if r.event == "feedback_reason"]
        assert reason.actor == ALICE and reason.session_id == session_id
        assert reason.details["reason"] == "it should have said which"


async def test_one_vote_per_person_per_answer_and_the_latest_counts(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        bot.llm.reply_text("Disk is 40% full.")
        await bot.mention("disk?", user=ALICE)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        [stop] = [c for c in bot.slack.calls_to("chat.stopStream") if c.params.get("blocks")]
        [block] = stop.params["blocks"]
        answer_ts = str(stop.params["ts"])

        async def click(value: str, user: str) -> None:
            body = _feedback_click(bot, value, user=user, ts=answer_ts, block_id=block["block_id"])
            assert (await bot.post(body, "application/x-www-form-urlencoded")).status_code == 200
            await bot.settle()

        def counted(name: str, value: str) -> str:
            return f'{name}{{value="{value}"}}'

        for _ in range(5):
            await click("good", BOB)
        text = bot.metrics.render().decode()
        assert f"{counted('opsgate_feedback_total', 'good')} 1.0" in text
        rows = [r for r in await bot.deps.store.audit_rows() if r.event == "feedback"]
        assert [(r.actor, r.details["value"]) for r in rows] == [(BOB, "good")]

        await click("bad", BOB)  # a change of mind: "bad" counts, "good" is taken back
        [session_id] = {r.session_id for r in rows}
        assert session_id is not None
        assert await votes(bot.deps.store, session_id, answer_ts) == {BOB: "bad"}
        text = bot.metrics.render().decode()
        assert f"{counted('opsgate_feedback_total', 'bad')} 1.0" in text
        assert f"{counted('opsgate_feedback_withdrawn_total', 'good')} 1.0" in text

        await click("good", ALICE)  # two people, two votes
        assert await votes(bot.deps.store, session_id, answer_ts) == {ALICE: "good", BOB: "bad"}
        rows = [r for r in await bot.deps.store.audit_rows() if r.event == "feedback"]
        assert [(r.actor, r.details["value"]) for r in rows] == [
            (BOB, "good"),
            (BOB, "bad"),
            (ALICE, "good"),
        ]


def _assistant_event(kind: str, *, thread_ts: str, viewing: str | None) -> dict[str, Any]:
    """An `assistant_thread_started` / `_context_changed` callback, shaped as Slack documents
    them (https://docs.slack.dev/reference/events/assistant_thread_started)."""
    context: dict[str, Any] = {"enterprise_id": None, "team_id": TEAM}
    if viewing is not None:
        context["channel_id"] = viewing
    return {
        "token": "unused",
        "team_id": TEAM,
        "api_app_id": "A0OPSGATE",
        "type": "event_callback",
        "event_id": f"Ev{uuid.uuid4().hex[:12].upper()}",
        "event_time": 1700000100,
        "authorizations": [
            {"team_id": TEAM, "user_id": "UBOT", "is_bot": True, "is_enterprise_install": False}
        ],
        "event": {
            "type": kind,
            "assistant_thread": {
                "user_id": ALICE,
                "context": context,
                "channel_id": DM,
                "thread_ts": thread_ts,
            },
            "event_ts": "1700000100.000100",
        },
    }


CONTAINER_POLICY = f"""
[defaults]
suggested_prompts = ["Is the disk full on web-1?", "What failed in the last deploy?"]

[channels_policy.{DB_CHANNEL}]
tools = ["echo"]
instructions = "You look after the database cluster."
"""


def _tool_names(request: dict[str, Any]) -> list[str]:
    return sorted(t["function"]["name"] for t in request.get("tools", []))


async def test_the_container_offers_prompts_and_the_viewed_channel_applies(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(CONTAINER_POLICY)
    root = "1700000100.000001"
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        started = _assistant_event("assistant_thread_started", thread_ts=root, viewing=CHANNEL)
        assert (await bot.event(started)).status_code == 200
        await bot.settle()
        prompts = bot.slack.suggested_prompts[(DM, root)]
        assert [p["message"] for p in prompts] == list(policy.defaults.suggested_prompts)

        # Looking at C0OPS (no policy of its own): every tool, no channel instructions.
        bot.llm.reply_text("Nothing is full.")
        await bot.message("is anything full?", user=ALICE, channel=DM, thread_ts=root)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert _tool_names(bot.llm.requests[0]) == ["echo", "run_command"]
        assert bot.slack.titles[(DM, root)] == "is anything full?"

        # The user moves to the database channel: its tools and instructions apply.
        changed = _assistant_event(
            "assistant_thread_context_changed", thread_ts=root, viewing=DB_CHANNEL
        )
        assert (await bot.event(changed)).status_code == 200
        await bot.settle()
        bot.llm.reply_text("Replication is fine.")
        await bot.message("and replication?", user=ALICE, channel=DM, thread_ts=root)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        request = bot.llm.requests[1]
        assert _tool_names(request) == ["echo"]
        system = " ".join(m["content"] for m in request["messages"] if m["role"] == "system")
        assert "You look after the database cluster." in system
        # The title is the first request's; the session is the DM thread's like any other.
        assert bot.slack.titles[(DM, root)] == "is anything full?"
        session = await bot.deps.store.find_session(TEAM, DM, root)
        assert session is not None and session.state == "idle"


async def test_the_viewed_channel_holds_across_a_restart(tmp_path: Path) -> None:
    """The context is in the database: a new app on the same file gives the conversation the
    channel its user moved to, and does not name the conversation again."""
    from tests.support.llm_server import LLMStandIn
    from tests.support.slack_api import SlackAPIStandIn

    policy = Policy.from_toml(CONTAINER_POLICY)
    root = "1700000100.000001"
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        async with running_bot(
            tmp_path, tools=make_tools(tmp_path), policy=policy, llm=llm, slack=slack
        ) as bot:
            started = _assistant_event("assistant_thread_started", thread_ts=root, viewing=None)
            assert (await bot.event(started)).status_code == 200
            changed = _assistant_event(
                "assistant_thread_context_changed", thread_ts=root, viewing=DB_CHANNEL
            )
            assert (await bot.event(changed)).status_code == 200
            await bot.settle()
            bot.llm.reply_text("Replication is fine.")
            await bot.message("and replication?", user=ALICE, channel=DM, thread_ts=root)
            await bot.llm.wait_for_requests(1)
            await bot.settle()
            assert _tool_names(llm.requests[0]) == ["echo"]
        # The first app is gone; a new one opens the same SQLite file.
        async with running_bot(
            tmp_path, tools=make_tools(tmp_path), policy=policy, llm=llm, slack=slack
        ) as bot:
            bot.llm.reply_text("Still fine.")
            await bot.message(
                "and now?", user=ALICE, channel=DM, thread_ts=root, ts="1700000200.000200"
            )
            await bot.llm.wait_for_requests(2)
            await bot.settle()
            request = llm.requests[1]
            assert _tool_names(request) == ["echo"]
            system = " ".join(m["content"] for m in request["messages"] if m["role"] == "system")
            assert "You look after the database cluster." in system
            assert len(slack.calls_to("assistant.threads.setTitle")) == 1
            assert slack.titles[(DM, root)] == "and replication?"


def _callback(event: dict[str, Any]) -> dict[str, Any]:
    """An Events API callback around `event`, as Slack wraps every event."""
    return {
        "token": "unused",
        "team_id": TEAM,
        "api_app_id": "A0OPSGATE",
        "type": "event_callback",
        "event_id": f"Ev{uuid.uuid4().hex[:12].upper()}",
        "event_time": 1700000100,
        "authorizations": [
            {"team_id": TEAM, "user_id": "UBOT", "is_bot": True, "is_enterprise_install": False}
        ],
        "event": event,
    }


def _messages_tab_opened() -> dict[str, Any]:
    """`app_home_opened` on the Messages tab: the agent messaging experience's "a user opened
    a DM with the app" (https://docs.slack.dev/reference/events/app_home_opened)."""
    return _callback(
        {
            "type": "app_home_opened",
            "user": ALICE,
            "channel": DM,
            "tab": "messages",
            "event_ts": "1700000100.000050",
        }
    )


def _app_context_changed(*entities: dict[str, Any]) -> dict[str, Any]:
    """`app_context_changed` (https://docs.slack.dev/reference/events/app_context_changed; its
    `channel` and `user` as `@slack/types`' `AppContextChangedEvent` declares them)."""
    return _callback(
        {
            "type": "app_context_changed",
            "user": ALICE,
            "channel": DM,
            "context": {"entities": list(entities)} if entities else {},
            "event_ts": "1700000100.000060",
        }
    )


def _channel_entity(channel: str) -> dict[str, Any]:
    return {"type": "slack#/types/channel_id", "value": channel, "team_id": TEAM}


async def test_the_agent_messaging_experience_offers_prompts_and_the_viewed_channel_applies(
    tmp_path: Path,
) -> None:
    """`agent_view`: the Messages tab opened gets the prompts (for the DM: no thread named, as
    Slack drops such a call of an agent app); `app_context_changed` says what the user looks
    at, and every new thread of the DM runs with that channel's tools and instructions."""
    policy = Policy.from_toml(CONTAINER_POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        assert (await bot.event(_messages_tab_opened())).status_code == 200
        await bot.settle()
        [call] = bot.slack.calls_to("assistant.threads.setSuggestedPrompts")
        assert "thread_ts" not in call.params and call.params["channel_id"] == DM
        prompts = bot.slack.suggested_prompts[(DM, "")]
        assert [p["message"] for p in prompts] == list(policy.defaults.suggested_prompts)
        assert not bot.slack.calls_to("views.publish")  # not the Home tab

        message_ctx = {"type": "slack#/types/message_context", "value": {"channel_id": "C0X"}}
        viewing_db = _app_context_changed(_channel_entity(DB_CHANNEL), message_ctx)
        assert (await bot.event(viewing_db)).status_code == 200
        await bot.settle()
        bot.llm.reply_text("Replication is fine.")
        first = await bot.message("and replication?", user=ALICE, channel=DM)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        request = bot.llm.requests[0]
        assert _tool_names(request) == ["echo"]
        system = " ".join(m["content"] for m in request["messages"] if m["role"] == "system")
        assert "You look after the database cluster." in system

        # Looking at nothing in particular: the next thread has the DM's own policy.
        assert (await bot.event(_app_context_changed())).status_code == 200
        await bot.settle()
        bot.llm.reply_text("Nothing is full.")
        second = await bot.message("is anything full?", user=ALICE, channel=DM)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert second != first
        assert _tool_names(bot.llm.requests[1]) == ["echo", "run_command"]
        assert not bot.slack.calls_to("assistant.threads.setTitle")
        for thread in (first, second):
            session = await bot.deps.store.find_session(TEAM, DM, thread)
            assert session is not None and session.state == "idle"


async def test_the_home_tab_still_opens_beside_the_agents_messages_tab(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        home = _messages_tab_opened()
        home["event"]["tab"] = "home"
        assert (await bot.event(home)).status_code == 200
        await bot.slack.wait_for("views.publish", timeout=10)
        assert not bot.slack.calls_to("assistant.threads.setSuggestedPrompts")


async def test_a_paused_dm_run_resumes_with_the_channel_it_started_with(tmp_path: Path) -> None:
    """The context of the DM moves on while a run waits: its resume keeps the tools it was
    offered when it started (pinned on its thread)."""
    policy = Policy.from_toml(
        CONTAINER_POLICY.replace("[defaults]", f'[defaults]\napprovers = ["{BOB}"]')
        + '\n[tools.echo]\napproval = "always"\n'
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        assert (await bot.event(_app_context_changed(_channel_entity(DB_CHANNEL)))).status_code
        await bot.settle()
        bot.llm.reply_tool_calls([("call_1", "echo", {"text": "hi"})])
        bot.llm.reply_text("Echoed.")
        await bot.message("echo hi", user=ALICE, channel=DM)
        [card] = await bot.wait_cards(1)
        assert (await bot.event(_app_context_changed(_channel_entity(CHANNEL)))).status_code
        await bot.settle()
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert _tool_names(bot.llm.requests[1]) == ["echo"]
