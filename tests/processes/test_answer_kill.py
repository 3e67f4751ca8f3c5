"""A kill -9 while a long answer is being streamed loses none of it: a real
`opsgate run --http` child streams a 9,000-character answer; its ending is in the outbox before
`chat.stopStream` is called, and the child is killed with that stop in flight (Slack not having
applied it, or having applied it without answering). Started again on the same file, the sender
finishes the streamed message from the outbox: the thread shows the whole answer exactly once,
with its feedback buttons, and the outbox is empty; the run ended when its ending was kept, so
nobody is told it was cut short."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.slack.outbox import ANSWER
from bot.store import SQLiteStore
from tests.support.bot_process import bot_process
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

ROOT = "1700000300.000100"
TEXT = " ".join(f"word{i}" for i in range(1100))  # about 9,000 characters: one streamed message


def answer_messages(slack: SlackAPIStandIn) -> list[dict[str, Any]]:
    return [m for m in slack.messages if m.get("thread_ts") == ROOT and "word" in str(m["text"])]


def finished(slack: SlackAPIStandIn) -> bool:
    """The thread shows the whole answer under its feedback buttons."""
    messages = answer_messages(slack)
    return any(
        str(m["text"]).split() == TEXT.split()
        and any(b.get("type") == "context_actions" for b in m.get("blocks") or [])
        for m in messages
    )


@pytest.mark.parametrize("applied", [False, True], ids=["stop not applied", "stop unanswered"])
async def test_a_kill_while_the_stream_stops_still_shows_the_answer_once(
    tmp_path: Path, applied: bool
) -> None:
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=30) as http,
    ):
        llm.reply_text(TEXT, chunk_size=40)
        if applied:
            slack.hang_after("chat.stopStream")
        else:
            slack.hold("chat.stopStream")  # never answered, never applied
        async with bot_process(tmp_path, llm, slack) as bot:
            assert await bot.mention(http, "tell me everything", ts=ROOT) == 200
            if applied:
                await slack.wait_for("chat.stopStream", timeout=60)
            else:
                await slack.wait_until(lambda: "chat.stopStream" in slack.holding, timeout=60)
            assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
        [streamed] = answer_messages(slack)
        assert finished(slack) is applied  # not applied: the tail and the buttons are missing
        async with SQLiteStore(tmp_path / "opsgate.db") as store:
            # The answer's ending (and perhaps the 👀's removal, not sent yet).
            assert (await store.outbox_stats()).depth.get(ANSWER) == 1
        async with bot_process(tmp_path, llm, slack) as bot:
            await slack.wait_for(
                "chat.update", where=lambda c: c.ok and c.params.get("ts") == streamed["ts"]
            )
            assert finished(slack)
            await slack.wait_for("reactions.remove", where=lambda c: c.ok)
            assert await bot.stop(signal.SIGTERM) == 0
        [message] = answer_messages(slack)
        assert message["ts"] == streamed["ts"]  # the streamed message, finished in place
        async with SQLiteStore(tmp_path / "opsgate.db") as store:
            assert (await store.outbox_stats()).depth == {}
        assert [c for c in slack.calls_to("chat.postMessage") if "word" in str(c.params)] == []
        # The run ended when its ending was kept: the restart does not call it cut short, and
        # its message lost its 👀.
        thread = [str(m["text"]) for m in slack.messages if m.get("thread_ts") == ROOT]
        assert not any("restarted" in t for t in thread), thread
        added = [c for c in slack.calls_to("reactions.add") if c.ok]
        removed = [c for c in slack.calls_to("reactions.remove") if c.ok]
        assert len(added) == len(removed) == 1
