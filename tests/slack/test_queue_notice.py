"""The channel's one "queued" notice is the store's: two senders on one database (as
two replicas) and a restart edit the same message, drawn from the store's queue, until the
queue is empty; then the burst is over and the next queued message posts a new notice. Never
two notices for one burst."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient

from bot.runs.notices import Queued
from bot.runs.output import Thread
from bot.slack.outbox import SlackOutbox
from bot.slack.queue_notice import QueueNotices, notice_finder, queue_renderer
from bot.store import QUEUE_NOTICE, SQLiteStore
from bot.store.queue_notices import QUEUE_SETTLE
from tests.support.slack_api import SlackAPIStandIn, SlackCall

CHANNEL = "C1"


@dataclass
class Replica:
    store: SQLiteStore
    outbox: SlackOutbox
    notices: QueueNotices

    async def queue(self, n: int) -> None:
        thread = Thread("T1", CHANNEL, f"1700000000.{n:06d}")
        session = await self.store.get_or_create_session("T1", CHANNEL, thread.thread_ts)
        await self.store.enqueue(session.id, requester="U1", text=f"alert {n}")
        await self.notices.queued(thread, Queued(limit=1, ahead=0))

    async def start(self) -> None:
        item = await self.store.claim_queued(CHANNEL, limit=100)
        assert item is not None
        session = await self.store.get_session(item.session_id)
        assert session is not None
        await self.notices.started(Thread("T1", CHANNEL, session.thread_ts))


@contextlib.asynccontextmanager
async def replica(
    db: Path, slack: SlackAPIStandIn, name: str, *, lease: timedelta = timedelta(seconds=60)
) -> AsyncIterator[Replica]:
    async with SQLiteStore(db) as store:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.url)
        outbox = SlackOutbox(
            store,
            client,
            claimer=name,
            poll=0.05,
            lease=lease,
            renderers={QUEUE_NOTICE: queue_renderer(store, notice_finder(client))},
        )
        notices = QueueNotices(outbox, store)
        task = asyncio.create_task(outbox.run())
        try:
            yield Replica(store, outbox, notices)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def settle(*replicas: Replica) -> None:
    """Until every sender is idle and the outbox is empty (a row one put, another may send)."""
    async with asyncio.timeout(10):
        while True:
            for each in replicas:
                await each.outbox.wait_idle()
            if not (await replicas[0].store.outbox_stats()).depth:
                return
            for each in replicas:
                each.outbox.wake()


def notices(slack: SlackAPIStandIn) -> list[SlackCall]:
    return [
        c
        for c in slack.calls_to("chat.postMessage")
        if c.ok and str(c.params.get("text")).startswith(":hourglass")
    ]


def shown(slack: SlackAPIStandIn, post: SlackCall) -> str:
    message = slack.message(CHANNEL, str(post.response["ts"]))
    assert message is not None
    return str(message["text"])


async def test_two_senders_and_a_restart_edit_one_notice_per_burst(tmp_path: Path) -> None:
    db = tmp_path / "opsgate.db"
    async with SlackAPIStandIn() as slack, replica(db, slack, "b") as b:
        async with replica(db, slack, "a") as a:
            for n in range(3):
                await a.queue(n)
            await settle(a, b)
            [post] = notices(slack)
            assert post.params.get("thread_ts") in (None, "")  # in the channel, for everyone
            assert "3 requests are waiting" in shown(slack, post)
            await b.start()  # the other replica starts one: the same message is edited
            await settle(a, b)
            assert notices(slack) == [post]
            assert "2 requests are waiting" in shown(slack, post)
        async with replica(db, slack, "a") as again:  # a restarted
            await again.start()
            await settle(again, b)
            assert notices(slack) == [post]
            assert "1 request is waiting" in shown(slack, post)
            await b.queue(3)
            await b.start()
            await again.start()
            await settle(again, b)
            assert notices(slack) == [post]
            assert "queue of this channel is empty" in shown(slack, post)
            assert await b.store.queue_notice(CHANNEL) is None  # the burst is over
            await again.queue(4)  # a new burst: a new notice
            await settle(again, b)
            [_, second] = notices(slack)
            assert "1 request is waiting" in shown(slack, second)
            assert "queue of this channel is empty" in shown(slack, post)
        edited = {str(c.params["ts"]) for c in slack.calls_to("chat.update")}
        assert edited == {str(post.response["ts"])}


async def test_a_queue_that_empties_within_the_first_settle_posts_no_notice(
    tmp_path: Path,
) -> None:
    """Its message was queued for less than `QUEUE_SETTLE`: no word of the queue, no edit."""
    async with SlackAPIStandIn() as slack, replica(tmp_path / "opsgate.db", slack, "a") as a:
        await a.queue(0)
        due = await a.store.outbox_next_due()
        assert due is not None and due > datetime.now(UTC) + timedelta(seconds=QUEUE_SETTLE / 2)
        await a.start()
        await settle(a)
        assert notices(slack) == [] and slack.calls_to("chat.update") == []
        assert await a.store.queue_notice(CHANNEL) is None  # the burst is over


async def test_a_notice_someone_deleted_is_posted_anew(tmp_path: Path) -> None:
    async with SlackAPIStandIn() as slack, replica(tmp_path / "opsgate.db", slack, "a") as a:
        for n in range(2):
            await a.queue(n)
        await settle(a)
        [first] = notices(slack)
        await a.outbox.client.chat_delete(channel=CHANNEL, ts=str(first.response["ts"]))
        await a.start()  # its edit finds the message gone: the next drawing posts
        await settle(a)
        [_, second] = notices(slack)
        assert "1 request is waiting" in shown(slack, second)
        await a.start()
        await settle(a)
        assert "queue of this channel is empty" in shown(slack, second)
        assert len(notices(slack)) == 2


async def test_a_notice_slack_posted_but_never_answered_is_adopted_not_posted_again(
    tmp_path: Path,
) -> None:
    """A replica whose post Slack applied while it never heard back (killed as it waited):
    once the row's lease ran out, the next replica looks for the burst's notice in the channel
    (its metadata names the burst), records it and edits it, instead of posting a second."""
    db, lease = tmp_path / "opsgate.db", timedelta(seconds=0.5)
    async with SlackAPIStandIn() as slack:
        slack.hang_after("chat.postMessage")
        async with replica(db, slack, "a", lease=lease) as a:
            await a.queue(0)
            [post] = await slack.wait_for("chat.postMessage")  # applied; its answer never comes
        async with replica(db, slack, "b", lease=lease) as b:
            unrecorded = await b.store.queue_notice(CHANNEL)
            assert unrecorded is not None and unrecorded.ts is None
            await b.queue(1)
            await settle(b)
            assert notices(slack) == [post]
            assert "2 requests are waiting" in shown(slack, post)
            notice = await b.store.queue_notice(CHANNEL)
            assert notice is not None and notice.ts == post.response["ts"]
            await b.start()
            await b.start()
            await settle(b)
        assert notices(slack) == [post]
        assert "queue of this channel is empty" in shown(slack, post)
        [looked] = slack.calls_to("conversations.history")  # only for the row tried before
        assert looked.params["channel"] == CHANNEL
        assert post.params["metadata"]["event_type"] == "opsgate_queue"
