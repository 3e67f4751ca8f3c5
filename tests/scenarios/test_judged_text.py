"""What runs is what was judged, end to end: the text the gate judged (the model's, or a
person's edit) reaches the shell byte for byte, as `-c`'s one argument. A stand-in shell
records its argv; the real Bolt app, Slack and LLM stand-ins and SQLite file around it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_core import Tool, ToolCall
from bot.policy import Policy
from bot.slack.ids import ACTION_FIELD, CALLBACK_EDIT
from bot.tools import make_run_command
from tests.scenarios.test_app import ALICE, BOB
from tests.support.harness import Bot, running_bot
from tests.support.slack_requests import interaction_body, view_submission

RECORDER = '#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done >> "$RECORD"\n'

MODEL_TEXT = "printf '%s' \"a  b\" \\\n  | cat  # tail \t"
EDITED_TEXT = "kubectl rollout restart deploy/web\\\n#;rm y  'q'\"d\" $(true) é  "


def _tools(tmp_path: Path, record: Path) -> list[Tool]:
    shell = tmp_path / "recording-shell"
    shell.write_text(RECORDER)
    shell.chmod(0o755)
    return [make_run_command(workdir=tmp_path, shell=shell, env={"RECORD": str(record)})]


def _ran(record: Path) -> list[bytes]:
    """Each command text the shell was given (after its `-c`)."""
    words = record.read_bytes().split(b"\0")[:-1]
    return [words[i + 1] for i, word in enumerate(words) if word == b"-c"]


def _edit(bot: Bot, ledger_id: str, command: str, user: str) -> Any:
    payload = view_submission(
        CALLBACK_EDIT, ledger_id, {"command": {ACTION_FIELD: command}}, user=user
    )
    return bot.post(interaction_body(payload), "application/x-www-form-urlencoded")


async def test_the_model_text_and_an_edited_text_reach_the_shell_as_judged(
    tmp_path: Path,
) -> None:
    record = tmp_path / "argv"
    policy = Policy.from_toml('[tools.run_command]\napproval = "always"\n')
    async with running_bot(tmp_path, tools=_tools(tmp_path, record), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": MODEL_TEXT})])
        await bot.mention("run it", user=ALICE, ts="1700000001.000100")
        [card] = await bot.wait_cards(1)
        bot.llm.reply_text("Done.")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()

        bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "uptime"})])
        await bot.mention("again", user=ALICE, ts="1700000002.000100")
        cards = await bot.wait_cards(2)
        bot.llm.reply_text("Done again.")
        await _edit(bot, cards[-1]["ledger_id"], EDITED_TEXT, BOB)
        await bot.llm.wait_for_requests(4)
        await bot.settle()

        row = await bot.deps.store.get_call(cards[-1]["ledger_id"])
        assert row is not None and row.edited_arguments is not None
        judged = json.loads(row.edited_arguments)["command"]  # what the gate judged on Edit
        call = ToolCall(id="x", name="run_command", arguments=row.edited_arguments)
        assert policy.decide("run_command", call).requires_approval
    assert judged == EDITED_TEXT
    assert _ran(record) == [MODEL_TEXT.encode(), EDITED_TEXT.encode()]
