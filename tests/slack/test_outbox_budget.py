"""The sender's slots go to the rows whose Slack bucket can take them now: a row that would
wait past `HOLD_SECONDS` for its bucket (a spent workspace-wide tier) is put back until then,
so a post in another channel is not queued behind it. Over the real outbox (SQLite) and the
Slack stand-in, the pacer's clock held still (the spent bucket never refills)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from bot.runs.output import Thread
from bot.slack.outbox import HOLD_SECONDS, NOTICE, REACTION, SlackOutbox
from bot.slack.output import MARK_SETTLE, SlackThreadOutput
from bot.slack.pacing import Pacer
from bot.slack.queue_notice import QueueNotices
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


async def test_a_mark_settles_while_marks_are_being_spent(tmp_path: Path) -> None:
    """A quiet workspace's 👀 is due at once; in a storm (two of Tier 3's burst went in the
    last seconds) it waits `MARK_SETTLE`, and a run answered by then costs no reaction call:
    its removal cancels the unsent mark."""
    async with SlackAPIStandIn() as slack, SQLiteStore(tmp_path / "opsgate.db") as store:
        pacer = Pacer(clock=lambda: 0.0)
        outbox = _outbox(slack, store, pacer)
        output = SlackThreadOutput(outbox.client, outbox, QueueNotices(outbox, store))
        quiet = Thread("T1", "C1", "1700000000.000100")
        assert await output.react(quiet, quiet.thread_ts, True)
        assert await store.outbox_next_due() is None  # due now
        for _ in range(2):
            await pacer.take("reactions.add")
        storm = Thread("T1", "C2", "1700000000.000200")
        assert await output.react(storm, storm.thread_ts, True)
        due = await store.outbox_next_due()
        assert due is not None
        assert (due - datetime.now(UTC)).total_seconds() > MARK_SETTLE / 2
        await output.react(storm, storm.thread_ts, False)  # answered within the second
        assert (await store.outbox_stats()).depth == {REACTION: 1}  # the quiet mark only
