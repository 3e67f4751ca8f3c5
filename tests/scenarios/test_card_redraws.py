"""A decision's card redraw goes through the outbox, written with the decision: the
click commits the decision and an `opsgate.card` intent together; the sender draws the card
from the call's state when it sends it (no buttons, who decided), and records it drawn. The
call's result owes one more (the card says it ran), unless it supersedes one still unsent.
The kill -9 between the two is tests/processes/test_card_redraw_kill.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from bot.store import CARD_REDRAW
from tests.scenarios.test_app import BOB, make_tools
from tests.support.harness import running_bot


def owed_rows(db: Path) -> list[tuple[str, str, dict[str, object]]]:
    """The outbox's card rows as the database holds them (read-only, beside the bot)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT method, key, params FROM outbox WHERE priority = 0").fetchall()
    return [(m, k, json.loads(p)) for m, k, p in rows]


async def test_a_decisions_redraw_is_owed_with_it_and_sent_by_the_outbox(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo redrawn"})])
        bot.llm.reply_text("Done.")
        await bot.mention("run echo please")
        [card] = await bot.wait_cards(1)
        ledger_id = card["ledger_id"]
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.card_ts is not None
        card_ts = row.card_ts
        gate = bot.slack.hold("chat.update")  # Slack does not answer the redraw yet
        assert (await bot.click("opsgate_approve", ledger_id, user=BOB)).status_code == 200
        await bot.slack.wait_until(lambda: bot.slack.holding.get("chat.update", 0) >= 1)
        decided = await bot.deps.store.get_call(ledger_id)
        assert decided is not None and decided.decided_by == BOB
        # The decision committed with its redraw: an intent naming the call, not a drawn card.
        assert owed_rows(tmp_path / "opsgate.db") == [
            (CARD_REDRAW, f"card:{ledger_id}", {"ledger_id": ledger_id})
        ]
        gate.set()
        await bot.llm.wait_for_requests(2)
        await bot.settle()  # the outbox included
        assert owed_rows(tmp_path / "opsgate.db") == []
        redraws = [c for c in bot.slack.calls_to("chat.update") if c.params.get("ts") == card_ts]
        # The decision's redraw waits a moment for the call's result (`QUIET_SETTLE`), which
        # superseded it here: one redraw says the card ran; a slower result would have made it
        # two, the decision's then the result's. The run service redrew nothing itself.
        [ran] = redraws
        blocks = json.dumps(ran.params["blocks"])
        assert '"actions"' not in blocks and BOB in blocks
        assert "`run_command` ran (approved by" in blocks
        drawn = await bot.deps.store.get_call(ledger_id)
        assert drawn is not None and drawn.card_drawn == "approved"
        assert await bot.deps.store.stale_cards() == []
