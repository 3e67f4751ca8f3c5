"""A card Slack refused is tried again while the bot runs (not only at the next start-up), the
thread is told if it still cannot be posted, and `invalid_blocks` falls back to a minimal card
whose arguments are attached as a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.scenarios.test_app import BOB, make_tools, tool_messages
from tests.support.harness import Bot, running_bot

RATE_LIMITED = 3
"""429s in a row for the card (the paced client waits each out: `bot.slack.pacing`)."""


def _short_retries(bot: Bot) -> None:
    bot.service.cards.retries.delays = (0.01, 0.01, 0.01)


def _refusals(bot: Bot, words: str = "I couldn't post the approval card") -> list[str]:
    """What the thread was told (posts Slack took) about a card that was not posted."""
    posted = [c for c in bot.slack.calls_to("chat.postMessage") if c.ok]
    return [str(c.params.get("text")) for c in posted if words in str(c.params.get("text"))]


def _is_card(params: dict[str, Any]) -> bool:
    return any(b.get("type") == "actions" for b in params.get("blocks") or [])


async def test_a_rate_limited_card_waits_its_turn_and_runs(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        _short_retries(bot)
        # a 429 is waited out, never given up, and never told as a failure.
        bot.slack.fail_next(
            "chat.postMessage", status=429, retry_after=0, times=RATE_LIMITED, where=_is_card
        )
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo later-card"})])
        bot.llm.reply_text("Ran it.")
        await bot.mention("run it")
        [card] = await bot.wait_cards(1)
        assert _refusals(bot) == []
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert "later-card" in result["content"]
        assert _refusals(bot, "still couldn't") == []


async def test_the_thread_is_told_when_every_try_failed(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        _short_retries(bot)
        bot.slack.fail_next("chat.postMessage", error="internal_error", times=4, where=_is_card)
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo never"})])
        await bot.mention("run it")
        await bot.slack.wait_for(
            "chat.postMessage", where=lambda c: "still couldn't post" in c.params.get("text", "")
        )
        await bot.settle()
        assert bot.cards() == []
        failed = [c for c in bot.slack.calls_to("chat.postMessage") if not c.ok]
        assert len(failed) == 4  # the first post and three background tries
        assert len(_refusals(bot)) == 1
        assert len(_refusals(bot, "still couldn't")) == 1


async def test_invalid_blocks_fall_back_to_a_minimal_card_with_the_arguments_attached(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.slack.fail_next("chat.postMessage", error="invalid_blocks")
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo minimal-card"})])
        bot.llm.reply_text("Ran it.")
        await bot.mention("run it")
        [card] = await bot.wait_cards(1)
        blocks = card["params"]["blocks"]
        assert "could not be drawn" in blocks[0]["text"]["text"]
        actions = [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]
        assert "opsgate_approve" in actions
        [upload] = bot.slack.uploaded_files
        assert "minimal-card" in bot.slack.uploaded(upload.file_id).content.decode()
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert "minimal-card" in result["content"]
        redrawn = bot.slack.calls_to("chat.update")[-1]
        assert redrawn.ok and not any(b["type"] == "actions" for b in redrawn.params["blocks"])
