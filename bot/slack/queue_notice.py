"""One "queued" notice per channel per burst, edited as the queue moves (issue 20).

A burst of alerts in a channel at its `concurrency` used to post one "Queued" notice into each
queued thread: as many `chat.postMessage` calls as alerts, all against the channel's one post a
second, ahead of the answers. Now the first queued message of a burst posts one notice in the
channel, saying how many requests wait; each later one, each start of a queued run and each
withdrawal redraws it (`chat.update`, through the outbox: only the latest redraw is sent), and
when the last has started it says so and the burst is over. The next queued message starts a
new notice. A direct message keeps its notice in the thread (nobody else's queue is there).

The count drawn is the store's (`depth`: the channel's queue across replicas), read at each
change this process sees. The burst (the notice's ts) lives in this process's memory: a restart
leaves the last drawing as it was, and replicas sharing a database each keep a notice of their
own, redrawn when they queue, start or end a run in the channel.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from slack_sdk.web.async_client import AsyncWebClient

from ..runs.notices import Queued
from ..runs.output import Thread
from ..store import OutboxEntry, QueueItem
from ._errors import SLACK_ERRORS, slack_error
from .notices import queue_notice_text
from .outbox import NOTICE, SlackOutbox

__all__ = ["QueueNotices", "merged", "queue_depth"]

logger = logging.getLogger("opsgate.slack.queue")


def merged(thread: Thread) -> bool:
    """Whether a thread's "queued" notice goes into its channel's one notice (not a DM's)."""
    return bool(thread.thread_ts) and not thread.channel_id.startswith("D")


class _QueueStore(Protocol):
    async def queue_items(
        self, *, channel_id: str | None = None, states: Collection[str] | None = None
    ) -> list[QueueItem]: ...


def queue_depth(store: _QueueStore) -> Callable[[str], Awaitable[int]]:
    """The `depth` of `QueueNotices` from the store: messages waiting in a channel's queue."""

    async def depth(channel: str) -> int:
        return len(await store.queue_items(channel_id=channel, states=["queued"]))

    return depth


@dataclass
class _Burst:
    limit: int
    waiting: set[str] = field(default_factory=set)
    """The threads whose message waits in the queue."""
    ts: str | None = None
    shown: str | None = None
    drawing: bool = False


class QueueNotices:
    """The bursts of each channel; `queued` and `started` move them."""

    def __init__(
        self,
        client: AsyncWebClient,
        outbox: SlackOutbox | None,
        depth: Callable[[str], Awaitable[int]] | None = None,
    ) -> None:
        self.client = client
        self.outbox = outbox
        self.depth = depth
        """Messages waiting in a channel's queue, as the store says (else this process's)."""
        self._bursts: dict[str, _Burst] = {}

    async def queued(self, thread: Thread, notice: Queued) -> None:
        """`thread`'s message waits in the queue of its channel."""
        burst = self._bursts.setdefault(thread.channel_id, _Burst(notice.limit))
        burst.limit = notice.limit
        burst.waiting.add(thread.thread_ts)
        await self._draw(thread.channel_id, burst)

    async def started(self, thread: Thread) -> None:
        """`thread`'s message left the queue (its run began, or it was withdrawn)."""
        burst = self._bursts.get(thread.channel_id)
        if burst is None or (self.depth is None and thread.thread_ts not in burst.waiting):
            return
        burst.waiting.discard(thread.thread_ts)
        await self._draw(thread.channel_id, burst)

    async def _draw(self, channel: str, burst: _Burst) -> None:
        """Bring the notice up to date; one drawer per burst, which draws until it is (the
        others' changes are in `burst`, so they need not wait for the post)."""
        if burst.drawing:
            return
        burst.drawing = True
        waiting = 1
        try:
            while True:
                waiting = await self._waiting(channel, burst)
                text = queue_notice_text(burst.limit, waiting)
                if text == burst.shown:
                    break
                if burst.ts is None:
                    if not waiting or not await self._post(channel, burst, text):
                        break
                else:
                    await self._redraw(channel, burst.ts, text)
                burst.shown = text
        finally:
            burst.drawing = False
            if not waiting and self._bursts.get(channel) is burst:
                del self._bursts[channel]  # the burst is over; the next one posts anew

    async def _waiting(self, channel: str, burst: _Burst) -> int:
        if self.depth is not None:
            try:
                return await self.depth(channel)
            except Exception:
                logger.exception("could not count the queue of %s", channel)
        return len(burst.waiting)

    async def _post(self, channel: str, burst: _Burst, text: str) -> bool:
        try:
            response = await self.client.chat_postMessage(channel=channel, text=text)
        except SLACK_ERRORS as exc:
            logger.warning("could not post the queue of %s: %s", channel, slack_error(exc))
            return False
        burst.ts = str(response["ts"])
        return True

    async def _redraw(self, channel: str, ts: str, text: str) -> None:
        params = {"channel": channel, "ts": ts, "text": text}
        if self.outbox is not None:
            key = f"queue:{channel}:{ts}"  # only the latest drawing is sent
            entry = OutboxEntry("chat.update", params, NOTICE, channel_id=channel, key=key)
            await self.outbox.put([entry])
            return
        try:
            await self.client.chat_update(channel=channel, ts=ts, text=text)
        except SLACK_ERRORS as exc:
            logger.warning("could not redraw the queue of %s: %s", channel, slack_error(exc))
