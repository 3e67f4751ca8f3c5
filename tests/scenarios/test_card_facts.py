"""What the card a person decides on says beyond the call, end to end (signed requests into the
real Bolt app, the Slack and LLM stand-ins, the real SQLite file): the model's stated reason
(its turn's text, or a `reason` argument its tool declares), the parts the policy judged and
why, why "Allow for" is absent, and what happened once decided."""

from __future__ import annotations

import json
from pathlib import Path

from agent_core import Tool, tool
from bot.policy import Policy
from tests.scenarios.test_app import ALICE, BOB, make_tools
from tests.support.harness import CHANNEL, Bot, running_bot

GATED = """
[tools.run_command]
approval = "rules"
[[tools.run_command.rules]]
prefix = ["echo"]
approval = "never"
[[tools.run_command.rules]]
prefix = ["rm"]
justification = "Deleting files."
[[tools.run_command.rules]]
prefix = ["touch"]
allow_for = "30m"
[tools.restart_service]
approval = "always"
"""


def _tools(tmp_path: Path) -> list[Tool]:
    @tool(requires_approval=True)
    def restart_service(service: str, reason: str) -> str:
        """Restart a service; say why."""
        return f"restarted {service}"

    return [*make_tools(tmp_path), restart_service]


async def _card_text(bot: Bot, n: int = 1) -> tuple[str, str]:
    cards = await bot.wait_cards(n)
    ledger_id = cards[-1]["ledger_id"]
    row = await bot.deps.store.get_call(ledger_id)
    assert row is not None and row.card_ts is not None
    message = bot.slack.message(CHANNEL, row.card_ts)
    assert message is not None
    return ledger_id, json.dumps(message["blocks"], ensure_ascii=False)


async def test_the_card_shows_the_models_words_escaped(tmp_path: Path) -> None:
    policy = Policy.from_toml(GATED)
    async with running_bot(tmp_path, tools=_tools(tmp_path), policy=policy) as bot:
        said = "The disk is full <!here>; removing the old build frees it."
        bot.llm.reply_tool_calls([("c1", "run_command", {"command": "rm -rf build"})], said)
        await bot.mention("free some disk", user=ALICE)
        ledger_id, shown = await _card_text(bot)
        assert "_The model says:_ “The disk is full &lt;!here&gt;; removing the old build" in shown
        assert "<!here>" not in shown
        await bot.click("opsgate_reject", ledger_id, user=BOB)


async def test_a_declared_reason_argument_is_the_models_reason(tmp_path: Path) -> None:
    policy = Policy.from_toml(GATED)
    async with running_bot(tmp_path, tools=_tools(tmp_path), policy=policy) as bot:
        arguments = {"service": "nginx", "reason": "It stopped answering *health checks*."}
        bot.llm.reply_tool_calls([("c1", "restart_service", arguments)], "Restarting it.")
        await bot.mention("nginx is down", user=ALICE)
        ledger_id, shown = await _card_text(bot)
        assert "_The model says:_ “It stopped answering *health checks*.”" in shown
        assert "Restarting it." not in shown
        await bot.click("opsgate_reject", ledger_id, user=BOB)


async def test_the_judged_parts_and_why_allow_for_is_absent(tmp_path: Path) -> None:
    policy = Policy.from_toml(GATED)
    async with running_bot(tmp_path, tools=_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("c1", "run_command", {"command": "echo ok; rm -rf x"})])
        bot.llm.reply_tool_calls([("c2", "run_command", {"command": "rm -rf y"})])
        bot.llm.reply_tool_calls([("c3", "run_command", {"command": "touch y"})])
        bot.llm.reply_text("Done.")
        await bot.mention("clean up", user=ALICE)

        ledger_id, shown = await _card_text(bot, 1)
        assert "*What the policy judged:*" in shown
        assert "1. `echo ok` → _runs without approval_ · `tools.run_command.rules[0]`" in shown
        assert "2. `rm -rf x` → _needs approval_ · `tools.run_command.rules[1]`: rm …" in shown
        assert "No “Allow for”: no allowance may cover it" in shown
        await bot.click("opsgate_approve", ledger_id, user=BOB)

        ledger_id, shown = await _card_text(bot, 2)
        assert "What the policy judged" not in shown  # one part, named by its rule already
        assert "No “Allow for”: tools.run_command.rules[1] sets no allow_for" in shown
        await bot.click("opsgate_approve", ledger_id, user=BOB)

        ledger_id, shown = await _card_text(bot, 3)
        assert "Allow for 30m" in shown and "No “Allow for”" not in shown
        await bot.submit_reject(ledger_id, "not now", user=BOB)
        await bot.llm.wait_for_requests(4)
        await bot.settle()

        # Decided: what happened leads, and the expiry is gone.
        for card in bot.cards():
            row = await bot.deps.store.get_call(card["ledger_id"])
            assert row is not None and row.card_ts is not None
            drawn = json.dumps(bot.slack.message(CHANNEL, row.card_ts), ensure_ascii=False)
            assert "wants to run" not in drawn and "expires" not in drawn
            if row.status == "rejected":
                assert f"`run_command` was rejected by <@{BOB}>: it did not run" in drawn
            else:
                # Redrawn once more when the call finished: it ran, and how it ended.
                assert row.status == "done"
                assert f"`run_command` ran (approved by <@{BOB}>), ended: exit code: 0" in drawn
