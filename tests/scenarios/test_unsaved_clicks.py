"""A click the database cannot save (read-only file, full disk): the clicker is told privately
that nothing was saved, `/readyz`'s write health records it, and a later click still counts."""

from __future__ import annotations

from pathlib import Path

from bot.store import SQLiteStore
from tests.scenarios.test_app import BOB, make_tools, tool_messages
from tests.support.harness import Bot, running_bot


async def _refuse_writes(bot: Bot, on: bool) -> None:
    """The bot's own connection refuses writes, as on a read-only file (`PRAGMA query_only`
    holds per connection: a second connection could not do this to the bot's)."""
    store = bot.deps.store
    assert isinstance(store, SQLiteStore)
    await store._connection().execute(f"PRAGMA query_only = {int(on)}")


async def test_an_approve_the_database_refuses_is_reported_and_can_be_repeated(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo saved-later"})])
        bot.llm.reply_text("Ran it.")
        await bot.mention("run it")
        [card] = await bot.wait_cards(1)
        await _refuse_writes(bot, True)
        response = await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        assert response.status_code == 200
        [told] = await bot.slack.wait_for("chat.postEphemeral")
        assert told.params["user"] == BOB
        assert "couldn't save your click" in told.params["text"]
        await bot.settle()
        assert not bot.deps.write_health.writable
        assert "click" in (bot.deps.write_health.reason or "")
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending"
        assert len(bot.llm.requests) == 1

        await _refuse_writes(bot, False)
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert "saved-later" in result["content"]


async def test_a_cancel_click_the_database_refuses_is_reported(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo kept"})])
        await bot.mention("run it")
        [card] = await bot.wait_cards(1)
        await _refuse_writes(bot, True)
        response = await bot.click("opsgate_cancel", card["ledger_id"], user=BOB)
        assert response.status_code == 200
        [told] = await bot.slack.wait_for("chat.postEphemeral")
        assert "couldn't save your click" in told.params["text"]
        await bot.settle()
        assert not bot.deps.write_health.writable
        await _refuse_writes(bot, False)
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending"
        session = await bot.deps.store.get_session(row.session_id)
        assert session is not None and session.state == "awaiting_approval"


async def test_a_reject_form_the_database_refuses_is_reported(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo kept"})])
        await bot.mention("run it")
        [card] = await bot.wait_cards(1)
        await _refuse_writes(bot, True)
        response = await bot.submit_reject(card["ledger_id"], "no", user=BOB)
        assert response.status_code == 200
        [told] = await bot.slack.wait_for("chat.postEphemeral")
        assert "couldn't save your click" in told.params["text"]
        await bot.settle()
        assert not bot.deps.write_health.writable
