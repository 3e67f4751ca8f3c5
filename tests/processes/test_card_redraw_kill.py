"""kill -9 after a decision committed and before its card's redraw reached Slack: a
real `opsgate run --http` child holds at the `redraw_claimed` fault point (the sender took the
redraw the store wrote with the decision, and has not drawn it) and is killed there. The
database holds the decision and its `opsgate.card` intent together; the restarted bot sends it,
drawn from the call's state, so the card loses its buttons."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import httpx

from bot.settings import HOLD_ENV
from bot.store import CARD_REDRAW, SQLiteStore
from tests.processes.test_durability import _approve_value
from tests.support.bot_process import SECRET, bot_process
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import block_actions, interaction_body, sign

MENTION_TS = "1700000004.000100"


def _is_card(params: dict[str, object]) -> bool:
    return "opsgate_approve" in str(params.get("blocks"))


async def _approve(http: httpx.AsyncClient, url: str, ledger_id: str, card_ts: str) -> int:
    payload = block_actions(
        "opsgate_approve", ledger_id, user="U0BOB", channel="C0OPS", message_ts=card_ts
    )
    body = interaction_body(payload)
    response = await http.post(
        f"{url}/slack/events",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded", **sign(SECRET, body)},
    )
    return response.status_code


async def test_a_kill_between_a_decision_and_its_redraw_is_redrawn_at_restart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "opsgate.db"
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
    ):
        llm.reply_tool_calls([("call_1", "run_command", {"command": "echo redraw"})], "On it.")
        for _ in range(3):
            llm.reply_text("Done.")
        async with bot_process(tmp_path, llm, slack, **{HOLD_ENV: "redraw_claimed"}) as bot:
            assert await bot.mention(http, "echo please", ts=MENTION_TS) == 200
            [posted] = await slack.wait_for(
                "chat.postMessage", where=lambda c: c.ok and _is_card(c.params), timeout=30
            )
            card_ts = str(posted.response["ts"])
            ledger_id = _approve_value(posted.params)
            assert await _approve(http, bot.url, ledger_id, card_ts) == 200
            await bot.wait_for_line("opsgate-fault: holding at redraw_claimed")
            assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
        assert not [c for c in slack.calls_to("chat.update") if c.params.get("ts") == card_ts]
        async with SQLiteStore(db) as store:
            row = await store.get_call(ledger_id)
            assert row is not None and row.decided_by == "U0BOB"
            assert row.card_drawn == "pending:0"  # what Slack still shows: buttons
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            owed = conn.execute("SELECT method, key, params FROM outbox WHERE priority = 0")
            assert [(m, k, json.loads(p)) for m, k, p in owed] == [
                (CARD_REDRAW, f"card:{ledger_id}", {"ledger_id": ledger_id})
            ]
        async with SQLiteStore(db) as store:
            assert await store.stale_cards() == []  # the outbox owes it, not start-up

        async with bot_process(tmp_path, llm, slack) as bot:
            await slack.wait_for(
                "chat.update", where=lambda c: c.ok and c.params.get("ts") == card_ts, timeout=30
            )
            shown = slack.message("C0OPS", card_ts)
            assert shown is not None
            blocks = json.dumps(shown.get("blocks"))
            assert '"actions"' not in blocks and "U0BOB" in blocks
            assert await bot.stop(signal.SIGTERM) == 0
        async with SQLiteStore(db) as store:
            row = await store.get_call(ledger_id)
            assert row is not None and row.card_drawn == "approved"
            assert 0 not in (await store.outbox_stats()).depth
            assert await store.stale_cards() == []
