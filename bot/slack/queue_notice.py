"""One "queued" notice per channel per burst, edited as the queue moves.

A burst of alerts in a channel at its `concurrency` used to post one "Queued" notice into each
queued thread: as many `chat.postMessage` calls as alerts, all against the channel's one post a
second, ahead of the answers. Now the first queued message of a burst posts one notice in the
channel, saying how many requests wait; each later one, each start of a queued run and each
withdrawal redraws it (`chat.update`), and when the queue is empty it says so and the burst is
over: the next queued message starts a new notice. A direct message keeps its notice in the
thread (nobody else's queue is there).

Which message is the burst's notice is the store's (`bot.store.queue_notices`), not this
process's: every change owes the outbox a `QUEUE_NOTICE` intent for the channel (one key per
channel: only the latest unsent is kept, and one is in flight at a time across replicas), and
the sender draws it when it sends it (`queue_renderer`) from the store's queue and notice: the
first drawing posts and records the message's ts before its row is done, every later one, on
whichever replica, edits that ts. So a restart or a second replica edits the same notice;
never two for one burst; a notice someone deleted is posted anew at the next drawing. A process
killed after Slack posted the notice and before its ts was recorded leaves the post in the
channel and its row to be sent again: each notice carries its burst in its message metadata,
so a drawing of a row tried before looks in the channel first (`conversations.history`, from
the burst's start) and adopts the notice it finds instead of posting a second. An output
without queued notices (no outbox: the terminal's, a bare one) tells a queued message in its
thread, as a direct message is told.

Every drawing but the burst's last settles (`bot.store.queue_notices.QUEUE_SETTLE`): it is due
a few seconds after the last change of its burst (`OutboxEntry.settle`), the changes meanwhile
joining it, so a channel's notice is edited at most once per few seconds, with the latest count,
and a queue that empties within the first few seconds posts nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Protocol

from slack_sdk.web.async_client import AsyncWebClient

from ..runs.notices import CancelledBeforeStart, Notice, Queued
from ..runs.output import Thread
from ..store import QueueItem, QueueNotice
from .ids import SLACK_ERRORS, find_marked_notice, queue_metadata, slack_error
from .notices import queue_notice_text
from .outbox import Renderer, SlackOutbox, Write

__all__ = [
    "Find",
    "QueueNoticeStore",
    "QueueNotices",
    "merged",
    "notice_finder",
    "queue_renderer",
]

logger = logging.getLogger("opsgate.slack.queue")

_SKEW = 60.0
"""Seconds before the burst's opening (our clock) the search starts at (Slack's clock)."""


def merged(thread: Thread) -> bool:
    """Whether a thread's "queued" notice goes into its channel's one notice (not a DM's)."""
    return bool(thread.thread_ts) and not thread.channel_id.startswith("D")


Find = Callable[[QueueNotice], Awaitable[str | None]]
"""The ts of a burst's notice already in its channel (posted by a try never recorded), or
None."""


class QueueNoticeStore(Protocol):
    """What the notices read and record (`bot.store.Store`)."""

    async def queue_items(
        self, *, channel_id: str | None = None, states: Collection[str] | None = None
    ) -> list[QueueItem]: ...

    async def owe_queue_notice(
        self, channel_id: str, *, concurrency: int | None = None
    ) -> bool: ...

    async def queue_notice(self, channel_id: str) -> QueueNotice | None: ...

    async def queue_notice_shown(self, channel_id: str, *, ts: str, shown: str) -> None: ...

    async def lost_queue_notice(self, channel_id: str, *, ts: str) -> bool: ...

    async def end_queue_notice(self, channel_id: str, *, asks: int, ts: str | None) -> None: ...


class QueueNotices:
    """`queued` and `started` owe the channel's notice a drawing; the outbox draws it.

    Why a message of its own: a queued alert gets no answer for a while, and without a word
    its requester cannot tell a queue from a bot that is down. Why one per channel per burst,
    its edits settling (`bot.store.queue_notices`): in a storm the notice would otherwise
    spend the workspace-wide `chat.update` bucket that cards' redraws need, on states nobody
    reads before the next one. The outbox draws the notices with `queue_renderer`, given to it
    when it is built."""

    def __init__(self, outbox: SlackOutbox, store: QueueNoticeStore) -> None:
        self.outbox = outbox
        self.store = store

    async def said(self, thread: Thread, notice: Notice) -> bool:
        """A notice the thread is told: whether the channel's queued notice says it instead
        (a message queued in a channel's thread); a message withdrawn before it started
        moves the queue (and is told in its thread as well)."""
        if isinstance(notice, Queued) and merged(thread):
            await self.queued(thread, notice)
            return True
        if isinstance(notice, CancelledBeforeStart):
            await self.started(thread)
        return False

    async def queued(self, thread: Thread, notice: Queued) -> None:
        """`thread`'s message waits in the queue of its channel."""
        await self._owe(thread.channel_id, notice.limit)

    async def started(self, thread: Thread) -> None:
        """A message of `thread`'s channel left the queue (its run began, or it was
        withdrawn): the channel's notice, if a burst is open, is drawn again."""
        if merged(thread):
            await self._owe(thread.channel_id, None)

    async def _owe(self, channel: str, concurrency: int | None) -> None:
        try:
            owed = await self.store.owe_queue_notice(channel, concurrency=concurrency)
        except Exception:  # a notice is not worth failing a run over
            logger.exception("could not owe the queued notice of %s", channel)
            return
        if owed:
            self.outbox.wake()


def notice_finder(client: AsyncWebClient) -> Find:
    """How `queue_renderer` finds the burst's notice in its channel (a failed look is None:
    the caller posts, a second notice at worst)."""
    bot_id: str | None = None

    async def find(notice: QueueNotice) -> str | None:
        nonlocal bot_id
        try:
            if bot_id is None:
                bot_id = str((await client.auth_test()).get("bot_id") or "")
            oldest = notice.opened_at.timestamp() - _SKEW  # posted after its burst opened
            return await find_marked_notice(
                client, bot_id, notice.channel_id, notice.burst, oldest=oldest
            )
        except SLACK_ERRORS as exc:
            channel, why = notice.channel_id, slack_error(exc)
            logger.warning("could not look for the queued notice of %s: %s", channel, why)
            return None

    return find


def queue_renderer(store: QueueNoticeStore, find: Find) -> Renderer:
    """The outbox's renderer for `QUEUE_NOTICE` rows (params `{"channel": ...}`): the notice
    as the channel's queue is now, posted the first time, edited after; None when it shows
    that already (or there is no burst). A row tried before whose burst has no ts may have
    posted it: `find` looks first, and a notice found is the burst's (recorded, then edited)."""

    async def render(params: Mapping[str, Any], retried: bool) -> Write | None:
        channel = str(params.get("channel") or "")
        notice = await store.queue_notice(channel)
        if notice is None:
            return None
        waiting = len(await store.queue_items(channel_id=channel, states=["queued"]))
        text = queue_notice_text(notice.concurrency, waiting)
        ts = notice.ts
        if ts is None and retried and (ts := await find(notice)) is not None:
            logger.info("adopting the queued notice %s already in %s", ts, channel)
            await store.queue_notice_shown(channel, ts=ts, shown="")

        async def ended(_answer: Mapping[str, Any] | None = None) -> None:
            await store.end_queue_notice(channel, asks=notice.asks, ts=ts)

        async def shown(answer: Mapping[str, Any]) -> None:
            await store.queue_notice_shown(channel, ts=ts or str(answer["ts"]), shown=text)

        if ts is None:
            if not waiting:  # started before its notice was posted: nothing to tell
                await ended()
                return None
            post = {"channel": channel, "text": text, "metadata": queue_metadata(notice.burst)}
            return Write("chat.postMessage", post, sent=shown)
        if text == notice.shown:
            if not waiting:
                await ended()
            return None

        async def gone() -> None:  # deleted: the next drawing posts a new one
            await store.lost_queue_notice(channel, ts=str(ts))

        update = {"channel": channel, "ts": ts, "text": text}
        return Write("chat.update", update, sent=ended if not waiting else shown, gone=gone)

    return render
