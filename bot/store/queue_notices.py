"""Each channel's one "queued" notice per burst, shared by every process.

A burst is the time a channel's queue is not empty. Its notice is one message in the channel,
posted once and then edited as the queue moves; which message that is, and what it shows, is a
row here (`queue_notices`), not process memory, so another replica or the next start edits the
same message instead of posting one of its own.

The row is opened by the first "queued" of a burst (`owe_queue_notice` with the channel's
concurrency), in the transaction that also owes the outbox a `QUEUE_NOTICE` intent (key
`queue:<channel>`: only the latest unsent one is kept, and one is in flight at a time across
replicas). Every later change (a message queued, a run started, a message withdrawn) owes another
intent, while the row exists. Every drawing but the last settles (`QUEUE_SETTLE`): one is due a
few seconds after the last change of its burst (`OutboxEntry.settle`), those owed meanwhile
superseding it, so the notice is edited at most once per few seconds, and a queue that empties
within the first settle is never posted at all (its message got its 👀 when it came; in a storm
that is a post and an edit per channel saved). The last drawing (a start that left nothing
queued: the notice's last word, which nothing after it would join) is due at once. The sender
draws the intent from the state when it sends it (`bot.slack.queue_notice`): the first drawing
posts and records the message's ts (`queue_notice_shown`) before the intent is done, later ones
edit that ts; once the queue is empty it draws "every request has started" and ends the burst
(`end_queue_notice`), or, with nothing posted yet, only ends it: the next "queued" opens a new
one, with a new message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from ._outbox_rows import OutboxEntry, put_rows
from .core import StoreCore
from .db import Row

__all__ = [
    "QUEUE_NOTICE",
    "QUEUE_PRIORITY",
    "QUEUE_SETTLE",
    "QueueNotice",
    "QueueNoticeRows",
    "queue_redraw",
]

QUEUE_NOTICE = "opsgate.queue"
"""The method of an intent row: "bring the queued notice of `params["channel"]` up to date"."""
QUEUE_PRIORITY = 2
"""As the other notices (`bot.slack.outbox.NOTICE`): after cards' redraws and answers."""
QUEUE_SETTLE = 2.0
"""Seconds a drawing waits for the changes after it (`OutboxEntry.settle`): a channel's notice
is edited at most once per `QUEUE_SETTLE`, a storm's queue moving does not spend the
`chat.update` calls cards' redraws need, and a message queued for less is not told it was."""


@dataclass(frozen=True, slots=True)
class QueueNotice:
    """A channel's burst: its concurrency (what the notice says is going), how many times it
    was asked for (`asks`, to tell a burst that ended from one that went on meanwhile), and
    its message (`ts`, None until posted) with the text it shows."""

    channel_id: str
    concurrency: int
    asks: int
    ts: str | None
    shown: str | None
    opened_at: datetime

    @property
    def burst(self) -> str:
        """What names the burst in its message's metadata, the same on every replica: a post
        whose ts was never recorded (a kill while Slack answered) is found by it."""
        return self.opened_at.astimezone(UTC).isoformat()


def queue_redraw(channel_id: str, settle: float = QUEUE_SETTLE) -> OutboxEntry:
    """The intent to draw `channel_id`'s queued notice as the queue is when it is sent."""
    return OutboxEntry(
        QUEUE_NOTICE,
        {"channel": channel_id},
        QUEUE_PRIORITY,
        channel_id=channel_id,
        key=f"queue:{channel_id}",
        settle=settle,
    )


_OPEN = (
    "INSERT INTO queue_notices (channel_id, concurrency, asks, opened_at)"
    " VALUES (:channel, :concurrency, 1, :now) ON CONFLICT (channel_id) DO UPDATE"
    " SET concurrency = excluded.concurrency, asks = queue_notices.asks + 1"
)


_QUEUED = "SELECT 1 FROM run_queue WHERE channel_id = :channel AND state = 'queued' LIMIT 1"


class QueueNoticeRows(StoreCore):
    """The queued-notice operations of `bot.store.Store`."""

    async def owe_queue_notice(self, channel_id: str, *, concurrency: int | None = None) -> bool:
        """Owe the outbox a drawing of the channel's notice. With `concurrency` (a message
        was queued) the burst is opened if it is not, unless nothing waits in the queue any
        more (the message started before it was told: nothing to tell); without (a run
        started, a message was withdrawn) only an open burst is drawn again: False, and nothing
        written, when none is open (the common case: asked at every run's start)."""
        if concurrency is None and await self.queue_notice(channel_id) is None:
            return False
        async with self._db.transaction("owe the queued notice") as tx:
            queued = await tx.fetch_one(_QUEUED, {"channel": channel_id}) is not None
            if concurrency is not None and queued:
                await tx.execute(
                    _OPEN, {"channel": channel_id, "concurrency": concurrency, "now": self._now()}
                )
            elif not await tx.fetch_one(
                "SELECT 1 FROM queue_notices WHERE channel_id = :channel", {"channel": channel_id}
            ):
                return False  # it ended meanwhile, or the message queued has started already
            # The burst's last word ("every request has started") goes at once.
            settle = QUEUE_SETTLE if queued else 0.0
            await put_rows(self._db, tx, [queue_redraw(channel_id, settle)], self._now())
        return True

    async def queue_notice(self, channel_id: str) -> QueueNotice | None:
        async with self._db.reading("read the queued notice") as tx:
            row = await tx.fetch_one(
                "SELECT * FROM queue_notices WHERE channel_id = :channel", {"channel": channel_id}
            )
        if row is None:
            return None
        opened = self._db.time_out(row["opened_at"]) or self._moment()
        return _notice(row, opened)

    async def queue_notice_shown(self, channel_id: str, *, ts: str, shown: str) -> None:
        """The notice's message `ts` now shows `shown` (the first time: it was posted)."""
        async with self._db.transaction("record the queued notice") as tx:
            await tx.execute(
                "UPDATE queue_notices SET ts = :ts, shown = :shown WHERE channel_id = :channel",
                {"channel": channel_id, "ts": ts, "shown": shown},
            )

    async def lost_queue_notice(self, channel_id: str, *, ts: str) -> bool:
        """Slack says the notice's message `ts` is gone (someone deleted it): the burst goes
        on without it, and a drawing is owed (in the same transaction), which posts anew."""
        async with self._db.transaction("lose the queued notice") as tx:
            lost = await tx.execute(
                "UPDATE queue_notices SET ts = NULL, shown = NULL"
                " WHERE channel_id = :channel AND ts = :ts",
                {"channel": channel_id, "ts": ts},
            )
            if lost:
                await put_rows(self._db, tx, [queue_redraw(channel_id)], self._now())
        return bool(lost)

    async def end_queue_notice(self, channel_id: str, *, asks: int, ts: str | None) -> None:
        """The burst drawn at `asks` ended (its queue emptied; message `ts` says so). If a
        message was queued since (`asks` moved on), that one starts a new burst: the row
        stays, without a message, so its drawing posts a new one."""
        async with self._db.transaction("end the queued notice") as tx:
            ended = await tx.execute(
                "DELETE FROM queue_notices WHERE channel_id = :channel AND asks = :asks",
                {"channel": channel_id, "asks": asks},
            )
            if not ended and ts is not None:
                await tx.execute(
                    "UPDATE queue_notices SET ts = NULL, shown = NULL"
                    " WHERE channel_id = :channel AND ts = :ts",
                    {"channel": channel_id, "ts": ts},
                )


def _notice(row: Row, opened_at: datetime) -> QueueNotice:
    return QueueNotice(
        channel_id=str(row["channel_id"]),
        concurrency=int(row["concurrency"]),
        asks=int(row["asks"]),
        ts=row["ts"],
        shown=row["shown"],
        opened_at=opened_at,
    )
