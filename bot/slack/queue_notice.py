"""One "queued" notice per channel per burst, edited as the queue moves (issue 20).

A burst of alerts in a channel at its `concurrency` used to post one "Queued" notice into each
queued thread: as many `chat.postMessage` calls as alerts, all against the channel's one post a
second, ahead of the answers. Now the first queued message of a burst posts one notice in the
channel, saying how many requests wait; each later one, each start of a queued run and each
withdrawal redraws it (`chat.update`, through the outbox: only the latest redraw is sent), and
when the last has started it says so and the burst is over. The next queued message starts a
new notice. A direct message keeps its notice in the thread (nobody else's queue is there).

The burst lives in this process's memory: a restart leaves the last drawing as it was, and
replicas sharing a database each keep a notice of their own for what they queued.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from slack_sdk.web.async_client import AsyncWebClient

from ..runs.notices import Queued
from ..runs.output import Thread
from ..store import OutboxEntry
from ._errors import SLACK_ERRORS, slack_error
from .notices import queue_notice_text
from .outbox import NOTICE, SlackOutbox

__all__ = ["QueueNotices", "merged"]

logger = logging.getLogger("opsgate.slack.queue")


def merged(thread: Thread) -> bool:
    """Whether a thread's "queued" notice goes into its channel's one notice (not a DM's)."""
    return bool(thread.thread_ts) and not thread.channel_id.startswith("D")


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

    def __init__(self, client: AsyncWebClient, outbox: SlackOutbox | None) -> None:
        self.client = client
        self.outbox = outbox
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
        if burst is None or thread.thread_ts not in burst.waiting:
            return
        burst.waiting.discard(thread.thread_ts)
        await self._draw(thread.channel_id, burst)

    async def _draw(self, channel: str, burst: _Burst) -> None:
        """Bring the notice up to date; one drawer per burst, which draws until it is (the
        others' changes are in `burst`, so they need not wait for the post)."""
        if burst.drawing:
            return
        burst.drawing = True
        try:
            while (text := queue_notice_text(burst.limit, len(burst.waiting))) != burst.shown:
                if burst.ts is None:
                    if not burst.waiting or not await self._post(channel, burst, text):
                        break
                else:
                    await self._redraw(channel, burst.ts, text)
                burst.shown = text
        finally:
            burst.drawing = False
            if not burst.waiting and self._bursts.get(channel) is burst:
                del self._bursts[channel]  # the burst is over; the next one posts anew

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
