"""Edit before approving, time-boxed allowances, reject reasons, the Home tab and the message
shortcut, end to end: signed requests into the Bolt app, the Slack Web API stand-in, the LLM
stand-in and the real SQLite file."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent_core import call_digest
from bot.policy import Policy
from bot.slack.ids import (
    ACTION_FIELD,
    ACTION_REASON,
    ACTION_REASON_CHOICE,
    BLOCK_REASON,
    BLOCK_REASON_CHOICE,
    CALLBACK_EDIT,
    CALLBACK_REJECT,
)
from tests.scenarios.test_app import (
    ALICE,
    BOB,
    CAROL,
    assert_history_valid,
    make_tools,
    tool_messages,
)
from tests.support.harness import CHANNEL, TEAM, Bot, running_bot, texts
from tests.support.slack_requests import (
    block_actions,
    event_body,
    interaction_body,
    view_submission,
)

OTHER_CHANNEL = "C0OTHER"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _view(call: Any) -> dict[str, Any]:
    view = call.params["view"]
    return json.loads(view) if isinstance(view, str) else dict(view)


def _buttons(blocks: list[dict[str, Any]]) -> list[str]:
    return [
        e["text"]["text"]
        for b in blocks
        if b.get("type") == "actions"
        for e in b.get("elements", [])
    ]


async def _submit_edit(bot: Bot, ledger_id: str, values: dict[str, str | None], user: str) -> Any:
    payload = view_submission(
        CALLBACK_EDIT, ledger_id, {k: {ACTION_FIELD: v} for k, v in values.items()}, user=user
    )
    return await bot.post(interaction_body(payload), "application/x-www-form-urlencoded")


def _executions(audit: list[Any], call_id: str) -> int:
    return sum(1 for a in audit if a.event == "execution_start" and a.call_id == call_id)


# -- edit -------------------------------------------------------------------------------------


async def test_edit_then_approve_runs_only_the_edited_command(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo model-said"})])
        bot.llm.reply_text("Done.")
        await bot.mention("say something", user=ALICE)
        [card] = await bot.wait_cards(1)
        blocks = card["params"]["blocks"]
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        assert _buttons(blocks) == ["Approve", "Reject", "Edit", "Cancel run"]

        # The requester may not edit; an approver gets the form with exactly the command.
        await bot.click("opsgate_edit", card["ledger_id"], user=ALICE)
        await bot.settle(runs=False)
        assert not bot.slack.calls_to("views.open")
        await bot.click("opsgate_edit", card["ledger_id"], user=BOB)
        [opened] = await bot.slack.wait_for("views.open")
        form = _view(opened)
        [field] = [b for b in form["blocks"] if b["type"] == "input"]
        assert field["element"]["type"] == "plain_text_input"
        assert field["element"]["initial_value"] == "echo model-said"

        response = await _submit_edit(bot, card["ledger_id"], {"command": "echo human-said"}, BOB)
        assert response.status_code == 200
        await bot.llm.wait_for_requests(2)
        await bot.settle()

        second = bot.llm.requests[1]
        assert_history_valid(second)
        assistant = next(m for m in second["messages"] if m.get("tool_calls"))
        stored_args = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
        assert stored_args == {"command": "echo model-said"}  # the model's own, kept
        [result] = tool_messages(second)
        assert "edited by a human" in result["content"]
        assert '"command": "echo human-said"' in result["content"]
        assert "human-said" in result["content"].split("Result:")[1]
        assert "model-said" not in result["content"].split("Result:")[1]

        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done" and row.edited_by == BOB
        edited_digest = call_digest("run_command", {"command": "echo human-said"})
        assert row.edited_digest == edited_digest
        redrawn = [c.params for c in bot.slack.calls_to("chat.update")]
        assert any(edited_digest in json.dumps(p.get("blocks")) for p in redrawn)
        audit = await bot.deps.store.audit_rows()
        [edited] = [a for a in audit if a.event == "edited"]
        assert edited.actor == BOB
        assert edited.details["original"] == {"command": "echo model-said"}
        assert edited.details["edited"] == {"command": "echo human-said"}
        assert _executions(audit, "call_1") == 1


async def test_an_edit_resets_a_two_person_count(tmp_path: Path) -> None:
    policy = Policy.from_toml("[defaults]\nrequired_approvals = 2\n")
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo first"})])
        bot.llm.reply_text("Done.")
        await bot.mention("run it", user=ALICE)
        [card] = await bot.wait_cards(1)
        ledger_id = card["ledger_id"]
        await bot.click("opsgate_approve", ledger_id, user=BOB)
        await bot.settle()
        await _submit_edit(bot, ledger_id, {"command": "echo second"}, CAROL)
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        # Bob's approval was of the old arguments: only Carol's edit counts, 1 of 2.
        assert row is not None and row.status == "pending" and row.approvals == (CAROL,)
        assert len(bot.llm.requests) == 1
        await bot.click("opsgate_approve", ledger_id, user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert "second" in result["content"].split("Result:")[1]


async def test_an_invalid_edit_comes_back_as_field_errors(tmp_path: Path) -> None:
    policy = Policy.from_toml('[tools.echo]\napproval = "always"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "echo", {"text": "hi"})])
        await bot.mention("echo", user=ALICE)
        [card] = await bot.wait_cards(1)
        # echo takes one string; a required field left empty is refused, nothing recorded.
        response = await _submit_edit(bot, card["ledger_id"], {"text": None}, BOB)
        assert response.status_code == 200
        answer = response.json()
        assert answer["response_action"] == "errors" and "text" in answer["errors"]
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending" and row.edited_arguments is None


# -- allow ------------------------------------------------------------------------------------

# Now an "Allow for" click allows the exact argv unless the deciding rule declares a
# prefix (`allow_prefix`): this policy gates every echo and declares `echo hi …` allowable, so
# that a later `echo hi two` is of the allowed shape.
ALLOW_POLICY = (
    '[tools.run_command]\napproval = "rules"\nallow_for = "1h"\n'
    '[[tools.run_command.rules]]\nprefix = ["echo"]\nallow_prefix = ["echo", "hi"]\n'
)


async def test_an_allowance_runs_the_same_shape_without_a_card_only_there_and_then(
    tmp_path: Path,
) -> None:
    clock = Clock()
    policy = Policy.from_toml(ALLOW_POLICY)
    marker = tmp_path / "must-not-exist"
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi one"})])
        bot.llm.reply_text("Done.")
        await bot.mention("first", user=ALICE, ts="1700000001.000100")
        [card] = await bot.wait_cards(1)
        blocks = card["params"]["blocks"]
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        assert _buttons(blocks) == ["Approve", "Reject", "Edit", "Allow for 1h", "Cancel run"]
        # The requester cannot allow their own call.
        await bot.click("opsgate_allow", card["ledger_id"], user=ALICE)
        await bot.settle()
        assert await bot.deps.store.active_allowances() == []
        await bot.click("opsgate_allow", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [allowance] = await bot.deps.store.active_allowances()
        assert allowance.expires_at == clock.now + timedelta(hours=1)
        assert (allowance.channel_id, allowance.granted_by) == (CHANNEL, BOB)

        # Same program and subcommand, same channel: runs with no card, announced and audited.
        bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "echo hi two"})])
        bot.llm.reply_text("Ran it.")
        await bot.mention("second", user=CAROL, ts="1700000002.000100")
        await bot.llm.wait_for_requests(4)
        await bot.settle()
        assert len(bot.cards()) == 1
        [result] = tool_messages(bot.llm.requests[3])
        assert "hi two" in result["content"]
        assert any(f"allowance `{allowance.id}`" in t and BOB in t for t in texts(bot.slack))
        used = [a for a in await bot.deps.store.audit_rows() if a.event == "allowance_used"]
        assert [(u.call_id, u.details["allowance_id"]) for u in used] == [("call_2", allowance.id)]

        # A command with a shell operator, another channel, and the end of the window: cards.
        bot.llm.reply_tool_calls(
            [("call_3", "run_command", {"command": f"echo hi; touch {marker}"})]
        )
        await bot.mention("third", user=CAROL, ts="1700000003.000100")
        await bot.wait_cards(2)
        bot.llm.reply_tool_calls([("call_4", "run_command", {"command": "echo hi four"})])
        await bot.mention("fourth", user=CAROL, channel=OTHER_CHANNEL, ts="1700000004.000100")
        await bot.wait_cards(3)
        clock.now += timedelta(hours=1)
        bot.llm.reply_tool_calls([("call_5", "run_command", {"command": "echo hi five"})])
        await bot.mention("fifth", user=CAROL, ts="1700000005.000100")
        await bot.wait_cards(4)
        assert not marker.exists()


async def test_allow_is_not_offered_where_two_approvals_are_needed(tmp_path: Path) -> None:
    policy = Policy.from_toml("[defaults]\nrequired_approvals = 2\n" + ALLOW_POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi"})])
        await bot.mention("run", user=ALICE)
        [card] = await bot.wait_cards(1)
        blocks = card["params"]["blocks"]
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        assert _buttons(blocks) == ["Approve", "Reject", "Edit", "Cancel run"]


# -- reject reasons ---------------------------------------------------------------------------


async def test_a_predefined_reason_and_free_text_reach_the_model(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi"})])
        bot.llm.reply_text("OK.")
        await bot.mention("run", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.click("opsgate_reject", card["ledger_id"], user=BOB)
        [opened] = await bot.slack.wait_for("views.open")
        [select] = [b for b in _view(opened)["blocks"] if b.get("block_id") == BLOCK_REASON_CHOICE]
        labels = [o["text"]["text"] for o in select["element"]["options"]]
        assert labels[0] == "Wrong target" and select["optional"] is True
        chosen = {"type": "static_select", "selected_option": select["element"]["options"][0]}
        values = {
            BLOCK_REASON_CHOICE: {ACTION_REASON_CHOICE: chosen},
            BLOCK_REASON: {ACTION_REASON: "prod, not staging"},
        }
        payload = view_submission(CALLBACK_REJECT, card["ledger_id"], values, user=BOB)
        await bot.post(interaction_body(payload), "application/x-www-form-urlencoded")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert result["content"] == (
            f"Rejected: Wrong target: prod, not staging (rejected by <@{BOB}>)"
        )


# -- Home tab ---------------------------------------------------------------------------------


async def test_the_home_tab_lists_and_decides_with_working_buttons(tmp_path: Path) -> None:
    policy = Policy.from_toml(f'[defaults]\napprovers = ["{BOB}", "{CAROL}"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo from-home"})])
        bot.llm.reply_text("Done.")
        await bot.mention("run", user=ALICE)
        [card] = await bot.wait_cards(1)

        for n, user in enumerate((BOB, ALICE)):
            # The app_home_opened envelope as the Events API documents it.
            body = {
                "type": "event_callback",
                "token": "legacy-verification-token",
                "team_id": TEAM,
                "api_app_id": "ATEST",
                "event_id": f"Ev0HOME{n}",
                "event_time": 1700000100,
                "event": {
                    "type": "app_home_opened",
                    "user": user,
                    "channel": "D0HOME",
                    "tab": "home",
                    "event_ts": "1700000100.000100",
                },
            }
            await bot.post(event_body(body), "application/json")
        await bot.settle()
        published = {c.params["user_id"]: _view(c) for c in bot.slack.calls_to("views.publish")}
        bob_buttons = _buttons(published[BOB]["blocks"])
        assert bob_buttons[:3] == ["Approve", "Reject", "Edit"]
        assert "Approve" not in _buttons(published[ALICE]["blocks"])  # her own request waits
        assert "echo from-home" in json.dumps(published[ALICE]["blocks"])

        payload = block_actions(
            "opsgate_approve", card["ledger_id"], user=BOB, channel=CHANNEL, message_ts="0"
        )
        payload.pop("channel")
        payload.pop("message")
        payload["container"] = {"type": "view", "view_id": f"VHOME{BOB}"}
        payload["view"] = published[BOB]
        await bot.post(interaction_body(payload), "application/x-www-form-urlencoded")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert "from-home" in result["content"]
        republished = [c for c in bot.slack.calls_to("views.publish") if c.params["user_id"] == BOB]
        assert "Approve" not in _buttons(_view(republished[-1])["blocks"])


# -- message shortcut -------------------------------------------------------------------------


def _message_action(user: str, message: dict[str, Any]) -> dict[str, Any]:
    """A `message_action` payload as Slack documents it for message shortcuts."""
    return {
        "type": "message_action",
        "callback_id": "opsgate_ask",
        "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "response_url": "https://hooks.slack.com/app-actions/T0TEST/1/abc",
        "team": {"id": TEAM, "domain": "opsgate-test"},
        "channel": {"id": CHANNEL, "name": "ops"},
        "user": {"id": user, "name": "someone"},
        "message": message,
        "message_ts": message["ts"],
        "action_ts": "1700000100.000001",
        "token": "legacy-verification-token",
        "is_enterprise_install": False,
    }


async def test_the_shortcut_starts_a_run_in_the_messages_thread(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("That alert means the disk is full.")
        message = {
            "type": "message",
            "user": ALICE,
            "ts": "1700000050.000200",
            "thread_ts": "1700000050.000100",
            "text": "Disk <alert> & co",
            "attachments": [{"text": "host db-1: 98% used"}],
        }
        payload = _message_action(CAROL, message)
        response = await bot.post(interaction_body(payload), "application/x-www-form-urlencoded")
        assert response.status_code == 200
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        last = bot.llm.requests[0]["messages"][-1]
        assert last["content"] == "Disk <alert> & co\nhost db-1: 98% used"
        session = await bot.deps.store.find_session(TEAM, CHANNEL, "1700000050.000100")
        assert session is not None and session.requester == CAROL
