"""Words people read in Slack, seen in use: what a card says about the tool, who may approve and
when it expires; a late click says what was decided, not an internal status."""

from __future__ import annotations

import json
from pathlib import Path

from bot.policy import Policy
from tests.scenarios.test_app import BOB, CAROL, make_tools
from tests.support.harness import running_bot


async def test_the_card_describes_the_tool_for_people(tmp_path: Path) -> None:
    policy = Policy.from_toml(f'[defaults]\napprovers = ["{BOB}", "{CAROL}"]\nttl = "15m"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "uptime"})])
        await bot.mention("uptime please")
        [card] = await bot.wait_cards(1)
        shown = json.dumps(card["params"]["blocks"])
        assert "Runs a shell command on the operations host." in shown
        assert "bash -c" not in shown  # the text written for the model
        assert f"Approvers: <@{BOB}> or <@{CAROL}>" in shown
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.expires_at is not None
        assert f"expires <!date^{int(row.expires_at.timestamp())}^" in shown


async def test_a_late_click_says_what_was_decided(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo done"})])
        bot.llm.reply_text("Done.")
        await bot.mention("echo")
        [card] = await bot.wait_cards(1)
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done"

        await bot.click("opsgate_reject", card["ledger_id"], user=CAROL)  # the old card
        await bot.settle()
        [late] = bot.slack.calls_to("chat.postEphemeral")
        assert late.params["user"] == CAROL
        assert "already approved" in str(late.params["text"])
        assert "done" not in str(late.params["text"])
