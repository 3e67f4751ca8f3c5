"""The sender's slots go to the rows whose Slack bucket can take them now: a row that would
wait past `HOLD_SECONDS` for its bucket (a spent workspace-wide tier) is put back until then,
so a post in another channel is not queued behind it. Over the real outbox (SQLite) and the
Slack stand-in, the pacer's clock held still (the spent bucket never refills)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

from bot.slack.outbox import HOLD_SECONDS, NOTICE, SlackOutbox
from bot.slack.pacing import Pacer
from bot.store import OutboxEntry, SQLiteStore
from tests.support.harness import paced_client
from tests.support.slack_api import SlackAPIStandIn


def _outbox(slack: SlackAPIStandIn, store: SQLiteStore, pacer: Pacer) -> SlackOutbox:
    client = paced_client(slack, pacer)
    return SlackOutbox(store, client, claimer="local", poll=0.05, concurrency=2)


async def test_rows_behind_a_spent_bucket_leave_the_others_their_slots(tmp_path: Path) -> None:
    async with SlackAPIStandIn() as slack, SQLiteStore(tmp_path / "opsgate.db") as store:
        pacer = Pacer(clock=lambda: 0.0)
        while pacer.claim("reactions.add", HOLD_SECONDS):  # a storm spent Tier 3's reactions
            pass
        outbox = _outbox(slack, store, pacer)
        marks = [
            OutboxEntry(
                "reactions.add",
                {"channel": "C1", "timestamp": f"1700000000.00{n:04d}", "name": "eyes"},
                NOTICE,
                channel_id="C1",
            )
            for n in range(4)
        ]
        post = {"channel": "C2", "thread_ts": "1700000000.000100", "text": "answer"}
        await outbox.put(marks)
        await outbox.put([OutboxEntry("chat.postMessage", post, NOTICE, channel_id="C2")])
        sender = asyncio.create_task(outbox.run())
        try:
            await slack.wait_for("chat.postMessage", where=lambda c: c.ok, timeout=5)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        assert slack.calls_to("reactions.add") == []  # still waiting for their bucket
        assert not outbox.idle  # what was put back is still owed


async def test_a_row_put_back_then_cancelled_is_no_longer_owed(tmp_path: Path) -> None:
    """A 👀 put back for its bucket and cancelled by its removal (the answer came first) is not
    waited for: the sender is idle at once, not when the mark would have been due."""
    async with SlackAPIStandIn() as slack, SQLiteStore(tmp_path / "opsgate.db") as store:
        pacer = Pacer(clock=lambda: 0.0)
        while pacer.claim("reactions.add", 0.0):
            pass
        for _ in range(20):  # and booked a minute ahead: the mark would be due in 25 s
            pacer.claim("reactions.add", 60.0)
        outbox = _outbox(slack, store, pacer)
        mark = {"channel": "C1", "timestamp": "1700000000.000100", "name": "eyes"}
        key = "reaction:C1:1700000000.000100"
        await outbox.put([OutboxEntry("reactions.add", mark, NOTICE, channel_id="C1", key=key)])
        put_back = asyncio.Event()
        later = store.outbox_later

        async def outbox_later(
            row_id: str, not_before: datetime, error: str, *, tried: bool = True
        ) -> None:
            await later(row_id, not_before, error, tried=tried)
            put_back.set()

        store.outbox_later = outbox_later  # type: ignore[method-assign]
        sender = asyncio.create_task(outbox.run())
        try:
            await asyncio.wait_for(put_back.wait(), 5)  # put back until its bucket
            assert await store.outbox_next_due() is not None
            assert not outbox.idle
            removal = OutboxEntry(
                "reactions.remove", mark, NOTICE, channel_id="C1", key=key, cancels=True
            )
            await outbox.put([removal])
            await asyncio.wait_for(outbox.wait_idle(), 5)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        assert slack.calls_to("reactions.add") == []
        assert slack.calls_to("reactions.remove") == []
