"""What runs is what was shown, on every surface that renders arguments, through the real app
over signed loopback HTTP: the Edit form never cuts a value (it is refused instead), a tool with
many arguments gets one JSON field within Slack's 100 blocks, and the Home tab offers no
Approve or Edit for a call it cannot show whole (locked, or cut)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.policy import Policy
from bot.runs.edits import ARGUMENTS_FIELD
from bot.slack.ids import ACTION_EDIT, ACTION_FIELD, CALLBACK_EDIT
from tests.scenarios.test_app import ALICE, BOB, make_tools, tool_messages
from tests.scenarios.test_edits_and_allowances import _buttons, _view
from tests.scenarios.test_home_and_allowances import APPROVERS, _open_home
from tests.support.harness import running_bot
from tests.support.slack_requests import interaction_body, view_submission

FORM = "application/x-www-form-urlencoded"


async def test_an_edit_of_arguments_longer_than_the_form_holds_is_refused_not_cut(
    tmp_path: Path,
) -> None:
    command = "echo " + "x" * 3100 + "; rm -rf DATA/old-logs"
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": command})])
        await bot.mention("clean up", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.click(ACTION_EDIT, card["ledger_id"], user=BOB)
        await bot.settle()
        assert not bot.slack.calls_to("views.open")  # no form holding a cut command
        [told] = bot.slack.calls_to("chat.postEphemeral")
        assert told.params["user"] == BOB
        assert "cannot be edited here" in told.params["text"]
        assert "3,127 characters" in told.params["text"]
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending" and row.edited_by is None


class WideTool:
    """A tool with 120 arguments (an MCP server's, say)."""

    name = "wide"
    description = "Takes many arguments."

    def __init__(self) -> None:
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {f"a{i}": {"type": "string"} for i in range(120)},
        }
        self.got: list[dict[str, Any]] = []

    def requires_approval(self) -> bool:
        return True

    async def invoke(self, arguments: dict[str, Any]) -> str:
        self.got.append(arguments)
        return "ok"


async def test_a_tool_with_120_arguments_is_edited_in_one_json_field(tmp_path: Path) -> None:
    wide = WideTool()
    arguments = {f"a{i}": f"v{i}" for i in range(120)}
    async with running_bot(tmp_path, tools=[*make_tools(tmp_path), wide]) as bot:
        bot.llm.reply_tool_calls([("call_1", "wide", arguments)])
        bot.llm.reply_text("Done.")
        await bot.mention("go wide", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.click(ACTION_EDIT, card["ledger_id"], user=BOB)
        [opened] = await bot.slack.wait_for("views.open")
        view = _view(opened)
        assert len(view["blocks"]) <= 100
        inputs = [b for b in view["blocks"] if b["type"] == "input"]
        assert [b["block_id"] for b in inputs] == [ARGUMENTS_FIELD]
        shown = json.loads(inputs[0]["element"]["initial_value"])
        assert shown == arguments

        edited = {**arguments, "a7": "edited"}
        values = {ARGUMENTS_FIELD: {ACTION_FIELD: json.dumps(edited)}}
        payload = view_submission(CALLBACK_EDIT, card["ledger_id"], values, user=BOB)
        response = await bot.post(interaction_body(payload), FORM)
        assert response.status_code == 200 and "errors" not in response.text
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert wide.got == [edited]
        [result] = tool_messages(bot.llm.requests[1])
        assert "ok" in result["content"]


async def test_the_home_tab_offers_no_approve_or_edit_for_a_call_it_cannot_show_whole(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(APPROVERS)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        # A locked card (its full arguments could not be attached) ...
        bot.slack.fail_next("files.getUploadURLExternal", error="internal_error", times=5)
        locked = "echo " + "x" * 6000 + "; touch pwned"
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": locked})])
        await bot.mention("first", user=ALICE, ts="1700000001.000100")
        [first] = await bot.wait_cards(1)
        # ... and one whose arguments the Home tab would have to cut (it shows 600).
        bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "echo " + "y" * 900})])
        await bot.mention("second", user=ALICE, ts="1700000002.000100")
        await bot.wait_cards(2)
        row = await bot.deps.store.get_call(first["ledger_id"])
        assert row is not None and row.card_locked is not None
        home = await _open_home(bot, BOB, 1)
        assert _buttons(home["blocks"]).count("Reject") == 2
        assert "Approve" not in _buttons(home["blocks"])
        assert "Edit" not in _buttons(home["blocks"])
        assert "too long to show here whole" in json.dumps(home["blocks"])
