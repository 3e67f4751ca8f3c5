"""Where Slack refuses streaming, a run's timeline is one message through its pause, a restart
of the bot between the pause and the approval, and its resume: the restarted bot edits the
message the paused part posted (kept with the run in the store) to the final state, and posts
no second one. A real `opsgate run --http` child, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.store import open_store
from tests.processes.test_durability import _approve_value
from tests.support.bot_process import SECRET, bot_process
from tests.support.llm_server import LLMStandIn
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.slack_api import SlackAPIStandIn, SlackCall
from tests.support.slack_requests import block_actions, interaction_body, sign

__all__ = ["postgres_cluster", "postgres_url"]

MENTION_TS = "1700000005.000100"


@pytest.fixture(params=["postgresql", "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "opsgate.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


def _is_timeline(params: dict[str, Any]) -> bool:
    blocks = params.get("blocks") or []
    return bool(blocks) and isinstance(blocks, list) and blocks[0].get("type") == "context"


def _timeline_posts(slack: SlackAPIStandIn) -> list[SlackCall]:
    return [c for c in slack.calls_to("chat.postMessage") if _is_timeline(c.params)]


def _text(message: dict[str, Any] | None) -> str:
    assert message is not None
    return str(message["blocks"][0]["elements"][0]["text"])


async def _kept(database: str, timeout: float = 30) -> None:
    """Until the paused run's timeline message is kept in the store (written at the pause)."""
    async with asyncio.timeout(timeout), open_store(database) as store:
        while True:
            session = await store.find_session("T0TEST", "C0OPS", MENTION_TS)
            if session is not None and await store.kept_timeline(session.id) is not None:
                return
            await asyncio.sleep(0.05)


async def test_a_resume_after_a_restart_edits_the_paused_timeline_message(
    tmp_path: Path, database: str
) -> None:
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
    ):
        slack.set_streaming_supported(False, error="not_allowed")
        # A look beside the gated call: a timeline whose every task waits on its card is not
        # shown at all (the cards say it).
        look = ("call_0", "http_request", {"url": f"{slack.url}/api/api.test"})
        gated = ("call_1", "run_command", {"command": "echo hi"})
        llm.reply_tool_calls([look, gated], "Checking.")
        llm.reply_text("Done.")
        async with bot_process(tmp_path, llm, slack, OPSGATE_DB=database) as bot:
            assert await bot.mention(http, "say hi", ts=MENTION_TS) == 200
            await slack.wait_until(lambda: bool(_timeline_posts(slack)), timeout=30)
            await _kept(database)
            assert await bot.stop(signal.SIGTERM) == 0
        [posted] = _timeline_posts(slack)
        timeline_ts = str(posted.response["ts"])
        assert "waiting for approval" in _text(slack.message("C0OPS", timeline_ts))
        [card] = [c for c in slack.calls_to("chat.postMessage") if "opsgate_approve" in str(c)]
        ledger_id, card_ts = _approve_value(card.params), str(card.response["ts"])

        async with bot_process(tmp_path, llm, slack, OPSGATE_DB=database) as bot:
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
            await slack.wait_until(
                lambda: "✅ run_command" in _text(slack.message("C0OPS", timeline_ts)),
                timeout=30,
            )
            assert await bot.stop(signal.SIGTERM) == 0
        assert _timeline_posts(slack) == [posted]
        edits = [c for c in slack.calls_to("chat.update") if _is_timeline(c.params)]
        assert edits and {c.params["ts"] for c in edits} == {timeline_ts}
        final = _text(slack.message("C0OPS", timeline_ts))
        assert "approved by <@U0BOB>" in final and "waiting" not in final
