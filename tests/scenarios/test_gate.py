"""One gate and one intake, through the real app over signed loopback HTTP: every action
listener and modal handler Bolt has registered refuses a click that hides its workspace (they
all ask `bot.approvals`), and every request of every registered kind is saved with
its dedupe key before its listener runs (so before any acknowledgement)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.listener.async_listener_start_handler import AsyncListenerStartHandler
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.policy import Policy
from bot.slack.ids import (
    ACTION_ALLOW,
    ACTION_ALLOW_SHAPE,
    ACTION_APPROVE,
    ACTION_BREAK_GLASS,
    ACTION_CANCEL,
    ACTION_EDIT,
    ACTION_FEEDBACK,
    ACTION_FEEDBACK_REASON,
    ACTION_FIELD,
    ACTION_GLASS_REASON,
    ACTION_REASON,
    ACTION_REJECT,
    ACTION_RERUN_PREVIEW,
    ACTION_REVIEWED,
    ACTION_REVOKE,
    BLOCK_ALLOW_SHAPE,
    BLOCK_FEEDBACK_REASON,
    BLOCK_GLASS_REASON,
    BLOCK_REASON,
    CALLBACK_ALLOW,
    CALLBACK_BREAK_GLASS,
    CALLBACK_EDIT,
    CALLBACK_FEEDBACK,
    CALLBACK_REJECT,
    SHORTCUT,
    feedback_block_id,
)
from bot.slack.listeners.cards import ACTION_MCP_ACCEPT, ACTION_MCP_KEEP
from tests.scenarios.test_app import ALICE, BOB, CAROL, make_tools
from tests.scenarios.test_assistant import (
    _app_context_changed,
    _assistant_event,
    _channel_entity,
    _messages_tab_opened,
)
from tests.scenarios.test_edits_and_allowances import ALLOW_POLICY, _message_action
from tests.support.harness import CHANNEL, TEAM, Bot, running_bot
from tests.support.slack_requests import (
    app_mention,
    block_actions,
    event_body,
    interaction_body,
    slash_command,
    view_submission,
)

FORM = "application/x-www-form-urlencoded"


def registered(app: AsyncApp) -> Iterator[tuple[str, str]]:
    """(kind, id) of every listener Bolt holds: `action`/`block_action` and an action id,
    `view_submission` and a callback id, `shortcut`, `command`, `event` and its type, …

    Bolt keeps each constraint in its matcher's closure; read, never called."""
    for listener in app._async_listeners:
        for matcher in listener.matchers:
            outer = getattr(matcher, "func", None)
            for cell in getattr(outer, "__closure__", None) or ():
                inner = cell.cell_contents
                if not callable(inner) or not getattr(inner, "__closure__", None):
                    continue
                kind = inner.__qualname__.split(".")[0]
                for constraint in inner.__closure__:
                    value = constraint.cell_contents
                    if isinstance(value, str) or hasattr(value, "pattern"):
                        yield kind, getattr(value, "pattern", value)


def _hidden_workspace(payload: dict[str, Any]) -> dict[str, Any]:
    payload.pop("team", None)
    payload["user"].pop("team_id", None)
    (payload.get("message") or {}).pop("team", None)
    (payload.get("view") or {}).pop("team_id", None)
    return payload


async def _paused(bot: Bot, text: str, command: str, ts: str) -> str:
    bot.llm.reply_tool_calls([(f"call_{ts}", "run_command", {"command": command})])
    await bot.mention(text, user=ALICE, ts=ts)
    card = (await bot.wait_cards(len(bot.cards()) + 1))[-1]
    return str(card["ledger_id"])


async def test_every_action_and_modal_handler_refuses_a_click_with_no_workspace(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(ALLOW_POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        assert bot.app is not None
        # An allowance to revoke: BOB allows a first call (with his workspace).
        first = await _paused(bot, "first", "echo one", "1700000001.000100")
        bot.llm.reply_text("Done.")
        await bot.click(ACTION_ALLOW, first, user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [allowance] = await bot.deps.store.active_allowances()
        ledger_id = await _paused(bot, "second", "echo two", "1700000002.000100")
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.card_ts

        def click(action_id: str, value: str) -> dict[str, Any]:
            return block_actions(
                action_id,
                value,
                user=CAROL,
                channel=CHANNEL,
                message_ts=str(row.card_ts),
                response_url=bot.slack.response_url(action_id),
            )

        edit_values = {COMMAND: {ACTION_FIELD: "ls /"}}
        reason = {BLOCK_REASON: {ACTION_REASON: "no"}}
        # The Allow dialog's submission, and feedback on the session's answer (a "bad" click
        # would open the reason modal: a refused one must not).
        picked = {"type": "radio_buttons", "selected_option": {"value": "0"}}
        shape = {BLOCK_ALLOW_SHAPE: {ACTION_ALLOW_SHAPE: picked}}
        feedback = block_actions(
            ACTION_FEEDBACK,
            "bad",
            user=CAROL,
            channel=CHANNEL,
            message_ts=str(row.card_ts),
            block_id=feedback_block_id(row.session_id),
        )
        said = json.dumps({"session": row.session_id, "ts": str(row.card_ts)})
        why = {BLOCK_FEEDBACK_REASON: {ACTION_FEEDBACK_REASON: "wrong"}}
        requests: dict[tuple[str, str], dict[str, Any]] = {
            ("action", ACTION_APPROVE): click(ACTION_APPROVE, ledger_id),
            ("action", ACTION_REJECT): click(ACTION_REJECT, ledger_id),
            ("action", ACTION_CANCEL): click(ACTION_CANCEL, ledger_id),
            ("action", ACTION_EDIT): click(ACTION_EDIT, ledger_id),
            ("action", ACTION_ALLOW): click(ACTION_ALLOW, ledger_id),
            ("action", ACTION_REVOKE): click(ACTION_REVOKE, allowance.id),
            ("action", ACTION_RERUN_PREVIEW): click(ACTION_RERUN_PREVIEW, ledger_id),
            ("view_submission", CALLBACK_EDIT): view_submission(
                CALLBACK_EDIT, ledger_id, edit_values, user=CAROL
            ),
            ("view_submission", CALLBACK_REJECT): view_submission(
                CALLBACK_REJECT, ledger_id, reason, user=CAROL
            ),
            ("view_submission", CALLBACK_ALLOW): view_submission(
                CALLBACK_ALLOW, f"{ledger_id} {row.running_digest}", shape, user=CAROL
            ),
            # Change freezes: "Break glass", its reason form, "Mark reviewed".
            ("action", ACTION_BREAK_GLASS): click(ACTION_BREAK_GLASS, ledger_id),
            ("view_submission", CALLBACK_BREAK_GLASS): view_submission(
                CALLBACK_BREAK_GLASS,
                f"{ledger_id} {row.running_digest}",
                {BLOCK_GLASS_REASON: {ACTION_GLASS_REASON: {"value": "outage"}}},
                user=CAROL,
            ),
            ("action", ACTION_REVIEWED): click(ACTION_REVIEWED, ledger_id),
            ("action", ACTION_FEEDBACK): feedback,
            ("action", ACTION_MCP_ACCEPT): click(ACTION_MCP_ACCEPT, "srv\ttool\tdigest"),
            ("action", ACTION_MCP_KEEP): click(ACTION_MCP_KEEP, "srv\ttool\tdigest"),
            ("view_submission", CALLBACK_FEEDBACK): view_submission(
                CALLBACK_FEEDBACK, said, why, user=CAROL
            ),
        }
        clicks = {
            (kind, name)
            for kind, name in registered(bot.app)
            if kind in ("action", "block_action", "view_submission", "view_closed", "view")
        }
        assert clicks == set(requests), "a click handler this test does not send"

        for payload in requests.values():
            response = await bot.post(interaction_body(_hidden_workspace(payload)), FORM)
            assert response.status_code == 200
        await bot.settle()

        after = await bot.deps.store.get_call(ledger_id)
        assert after is not None and after.status == "pending" and after.approvals == ()
        assert after.edited_by is None
        assert [a.id for a in await bot.deps.store.active_allowances()] == [allowance.id]
        session = await bot.deps.store.get_session(after.session_id)
        assert session is not None and session.state == "awaiting_approval"
        assert not bot.slack.calls_to("views.open")  # no form was opened
        audited = {r.event for r in await bot.deps.store.audit_rows()}
        assert not audited & {"feedback", "feedback_reason", "break_glass", "break_glass_reviewed"}
        told = [c.params["text"] for c in bot.slack.calls_to("chat.postEphemeral")]
        refused = [t for t in told if "did not say which workspace" in t]
        # Revoke answers where it was clicked (its response_url), in its own words.
        assert len(refused) == len(requests) - 1, told
        [revoked] = await bot.hook_answers(ACTION_REVOKE)
        assert "only its granter or an approver" in revoked["text"]
        # every refusal row names who may decide (`rule`) and the policy rule that
        # applied (`policy_rule`, None where no tool call's rule is involved).
        refusals = [r for r in await bot.deps.store.audit_rows() if r.event == "refusal"]
        assert len(refusals) >= 10
        for r in refusals:
            assert "rule" in r.details and "policy_rule" in r.details, dict(r.details)


COMMAND = "command"


def _inbox_rows(database: Path, kind: str = "request") -> list[dict[str, Any]]:
    with sqlite3.connect(database) as raw:
        rows = raw.execute("SELECT payload FROM inbox WHERE kind = ?", (kind,)).fetchall()
    return [json.loads(r[0]) for r in rows]


class _SavedBeforeListener(AsyncListenerStartHandler):
    """Notes, as each listener starts (before it can call `ack`), whether its request's row is
    in the database already (read through a connection of its own): a `request` row holding
    its body, or, for a message the bot acts on, that message's own row (its one row)."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.seen: list[tuple[str, bool]] = []

    async def handle(self, request: AsyncBoltRequest, response: BoltResponse | None) -> None:
        bodies = [row["body"] for row in _inbox_rows(self.database)]
        messages = {(m["channel"], m["ts"]) for m in _inbox_rows(self.database, "message")}
        event = request.body.get("event") or {}
        kind = str(request.body.get("type") or ("command" if "command" in request.body else ""))
        as_message = (event.get("channel"), event.get("ts")) in messages
        self.seen.append((kind, request.body in bodies or as_message))


async def test_every_kind_of_request_is_saved_before_its_listener_runs(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        assert bot.app is not None
        database = tmp_path / "opsgate.db"
        spy = _SavedBeforeListener(database)
        bot.app._async_listener_runner.listener_start_handler = spy
        kinds = {kind for kind, _ in registered(bot.app)}
        bot.llm.reply_text("Looked.")
        bot.llm.reply_text("Looked again.")
        message = {"type": "message", "user": ALICE, "ts": "1700000050.000200", "text": "disk"}
        started = _assistant_event("assistant_thread_started", thread_ts="1.5", viewing=CHANNEL)
        changed = _assistant_event(
            "assistant_thread_context_changed", thread_ts="1.5", viewing=None
        )
        sent: dict[str, tuple[bytes, str]] = {
            "event": (
                event_body(
                    app_mention(
                        "<@UBOT> look",
                        channel=CHANNEL,
                        user=ALICE,
                        ts="1700000060.000100",
                        event_id="EvGATE1",
                    )
                ),
                "application/json",
            ),
            # The AI-app container's events, each its own listener.
            "event:assistant_thread_started": (event_body(started), "application/json"),
            "event:assistant_thread_context_changed": (event_body(changed), "application/json"),
            # The agent messaging experience's: the Messages tab opened, the context changed.
            "event:app_home_opened": (event_body(_messages_tab_opened()), "application/json"),
            "event:app_context_changed": (
                event_body(_app_context_changed(_channel_entity(CHANNEL))),
                "application/json",
            ),
            "command": (slash_command("help", user=BOB, channel=CHANNEL), FORM),
            "shortcut": (interaction_body(_message_action(BOB, message)), FORM),
            "message_shortcut": (interaction_body(_message_action(BOB, message)), FORM),
            "action": (
                interaction_body(
                    block_actions(
                        ACTION_REVOKE, "nothing", user=BOB, channel=CHANNEL, message_ts="1.2"
                    )
                ),
                FORM,
            ),
            "view_submission": (
                interaction_body(
                    view_submission(CALLBACK_REJECT, "nothing", {}, user=BOB, team=TEAM)
                ),
                FORM,
            ),
            # The feedback button and its modal, the Allow dialog.
            "action:feedback": (
                interaction_body(
                    block_actions(
                        ACTION_FEEDBACK,
                        "good",
                        user=BOB,
                        channel=CHANNEL,
                        message_ts="1.3",
                        block_id=feedback_block_id("nothing"),
                    )
                ),
                FORM,
            ),
            "view_submission:feedback": (
                interaction_body(view_submission(CALLBACK_FEEDBACK, "{}", {}, user=BOB, team=TEAM)),
                FORM,
            ),
            "view_submission:allow": (
                interaction_body(
                    view_submission(CALLBACK_ALLOW, "nothing", {}, user=BOB, team=TEAM)
                ),
                FORM,
            ),
        }
        listed = {k.partition(":")[0] for k in sent}
        assert kinds <= listed, f"a listener kind this test does not send: {kinds - listed}"
        events = {n for k, n in registered(bot.app) if k == "event" and isinstance(n, str)}
        named = {"app_mention", "message", "app_home_opened", "assistant_thread_started"}
        named |= {"assistant_thread_context_changed", "app_context_changed", ".*"}
        # Membership events change no state a person acts on: they drop a cached member list.
        named |= {"member_joined_channel", "member_left_channel"}
        assert events <= named, f"an event listener this test does not know: {events - named}"
        for body, content_type in {v for k, v in sent.items() if k.partition(":")[0] in kinds}:
            response = await bot.post(body, content_type)
            assert response.status_code == 200, response.text
        await bot.settle()
        assert spy.seen, "no listener ran"
        assert all(saved for _, saved in spy.seen), spy.seen
        ran = {kind for kind, _ in spy.seen}
        assert {"event_callback", "command", "message_action", "block_actions"} <= ran
        assert "view_submission" in ran


async def test_the_same_signed_shortcut_twice_starts_one_run(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("One answer.")
        bot.llm.reply_text("A second answer that must not come.")
        message = {"type": "message", "user": ALICE, "ts": "1700000050.000200", "text": "disk"}
        body = interaction_body(_message_action(BOB, message))
        first = await bot.post(body, FORM)
        second = await bot.post(body, FORM)
        assert (first.status_code, second.status_code) == (200, 200)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert len(bot.llm.requests) == 1
        assert len(_inbox_rows(tmp_path / "opsgate.db")) == 1


async def test_a_shortcut_saved_but_never_handled_is_handled_at_the_next_start(
    tmp_path: Path,
) -> None:
    message = {"type": "message", "user": ALICE, "ts": "1700000050.000200", "text": "disk"}
    payload = _message_action(BOB, message)
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        # What the intake had saved when a kill -9 came after the 200.
        await bot.deps.store.inbox_add(
            "request", {"kind": "message_action", "body": payload}, keys=["request:x"]
        )
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Answered after the restart.")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert bot.llm.requests[0]["messages"][-1]["content"] == "disk"
        assert await bot.deps.store.find_session(TEAM, CHANNEL, "1700000050.000200") is not None


async def test_a_shortcut_the_database_cannot_save_is_not_acted_on_and_said(
    tmp_path: Path,
) -> None:
    from tests.scenarios.test_unsaved_clicks import _refuse_writes

    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        message = {"type": "message", "user": ALICE, "ts": "1700000050.000200", "text": "disk"}
        await _refuse_writes(bot, True)
        response = await bot.post(interaction_body(_message_action(BOB, message)), FORM)
        assert response.status_code == 200
        [told] = await bot.slack.wait_for("chat.postEphemeral")
        assert told.params["user"] == BOB and "couldn't save your message" in told.params["text"]
        await _refuse_writes(bot, False)
        await bot.settle()
        assert bot.llm.requests == []
        assert SHORTCUT  # the wire id the payload names (pinned in test_wire_strings)
