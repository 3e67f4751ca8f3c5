"""kill -9 while Slack posts a card but has not answered: the restarted bot adopts the card it
finds in the thread (by its message metadata) instead of posting a second one, and a click on
it runs the command once. A real `opsgate run --http` child, as in
tests/processes/test_durability.py."""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from slack_sdk.web.async_client import AsyncWebClient

from bot.runs.output import Thread
from bot.runs.views import CardCall, CardRef
from bot.slack import SlackThreadOutput
from bot.slack.outbox import SlackOutbox
from bot.slack.queue_notice import QueueNotices
from bot.store import SQLiteStore
from tests.processes.test_durability import _approve_value
from tests.support.bot_process import SECRET, bot_process
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn, SlackCall
from tests.support.slack_requests import block_actions, interaction_body, sign

MENTION_TS = "1700000003.000100"
LOCK = "arguments_not_attached"


def _is_card(params: dict[str, Any]) -> bool:
    return "opsgate_approve" in str(params.get("blocks"))


def _card_posts(slack: SlackAPIStandIn) -> list[SlackCall]:
    return [c for c in slack.calls_to("chat.postMessage") if _is_card(c.params)]


def _live_cards(slack: SlackAPIStandIn) -> list[dict[str, Any]]:
    return [m for m in slack.messages if _is_card(m)]


async def test_a_card_posted_while_the_bot_was_killed_is_adopted_not_posted_again(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran.txt"
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
    ):
        llm.reply_tool_calls(
            [("call_1", "run_command", {"command": f"echo ran >> {marker}"})], "Restarting."
        )
        llm.reply_text("Done.")
        slack.hang_after("chat.postMessage", where=_is_card)
        async with bot_process(tmp_path, llm, slack) as bot:
            assert await bot.mention(http, "touch the marker", ts=MENTION_TS) == 200
            [posted] = await slack.wait_for(
                "chat.postMessage", where=lambda c: _is_card(c.params), timeout=30
            )
            assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
        card_ts = str(posted.response["ts"])
        ledger_id = _approve_value(posted.params)
        async with SQLiteStore(tmp_path / "opsgate.db") as store:
            row = await store.get_call(ledger_id)
        assert row is not None and row.status == "pending" and row.card_ts is None  # an orphan

        async with bot_process(tmp_path, llm, slack) as bot:
            # Recovery either redraws the orphan or posts another card: wait for either.
            await slack.wait_until(
                lambda: (
                    len(_card_posts(slack)) > 1
                    or any(c.params.get("ts") == card_ts for c in slack.calls_to("chat.update"))
                ),
                timeout=30,
            )
            assert len(_card_posts(slack)) == 1
            [card] = _live_cards(slack)
            assert card["ts"] == card_ts and _approve_value(card) == ledger_id
            replies = slack.calls_to("conversations.replies")
            assert replies and replies[0].params["ts"] == MENTION_TS

            payload = block_actions(
                "opsgate_approve", ledger_id, user="U0BOB", channel="C0OPS", message_ts=card_ts
            )
            body = interaction_body(payload)
            response = await http.post(
                f"{bot.url}/slack/events",
                content=body,
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    **sign(SECRET, body),
                },
            )
            assert response.status_code == 200
            await llm.wait_for_requests(2, timeout=30)
            await slack.wait_until_ended({card_ts}, "Done.")
            assert await bot.stop(signal.SIGTERM) == 0
        assert len(_card_posts(slack)) == 1
        assert _live_cards(slack) == []  # the adopted card was redrawn decided
    assert marker.read_text() == "ran\n"
    async with SQLiteStore(tmp_path / "opsgate.db") as store:
        row = await store.get_call(ledger_id)
        events = [r.event for r in await store.audit_rows()]
    assert row is not None and row.card_ts == card_ts and row.status == "done"
    assert events.count("execution_start") == 1


async def test_find_card_keeps_the_lock_and_ignores_other_apps_and_other_calls(
    tmp_path: Path,
) -> None:
    thread = Thread("T0TEST", "C0OPS", MENTION_TS)
    locked = CardCall("led_1", "shell", "", {"command": "x"}, "d1", "U0A", locked=LOCK)
    async with SlackAPIStandIn() as slack, SQLiteStore(tmp_path / "opsgate.db") as store:

        def output_for(token: str) -> SlackThreadOutput:
            client = AsyncWebClient(token=token, base_url=slack.url)
            outbox = SlackOutbox(store, client, claimer="local")
            return SlackThreadOutput(client, outbox, QueueNotices(outbox, store))

        output = output_for("xoxb-test")
        assert await output.find_card(thread, "led_1") is None  # nothing in the thread yet
        unlocked = await output.post_card(thread, replace(locked, ledger_id="led_2", locked=None))
        posted = await output.post_card(thread, locked)
        assert isinstance(posted, CardRef) and posted.locked == LOCK
        assert isinstance(unlocked, CardRef) and unlocked.locked is None
        assert await output.find_card(thread, "led_1") == posted
        assert await output.find_card(thread, "led_2") == unlocked
        assert await output.find_card(thread, "led_3") is None
        # The same cards seen by another app (another bot id) are not its cards.
        slack.respond_with("auth.test", {"ok": True, "team_id": "T0TEST", "bot_id": "BOTHER"})
        other = output_for("xoxb-other")
        assert await other.find_card(thread, "led_1") is None
