"""The run queue: messages waiting for a free slot in their channel, first come first served.

Each step that moves an item also moves its session (claiming an item starts its run), in one
transaction, so concurrent dispatchers in any number of processes never exceed a channel's
limit and never start an item twice.
"""

from __future__ import annotations

from collections.abc import Collection

from ..errors import StoreError
from ..models import EnqueueOutcome, QueueItem
from ._connection import SQLiteConnection, fetch_all, fetch_one, queue_row, session_row

__all__ = ["QueuePart"]


class QueuePart(SQLiteConnection):
    async def enqueue(
        self,
        session_id: str,
        *,
        requester: str,
        text: str,
        message_ts: str | None = None,
    ) -> EnqueueOutcome:
        """Queue a message that should start a run in its session, unless the session is busy.

        Busy: its run is active or waits for approval, or another message of the thread is
        already queued (one run per thread, `docs/architecture.md`). Checked and written in one
        transaction.
        """
        async with self._transaction("enqueue") as conn:
            session = session_row(await self._session_row(conn, session_id))
            waiting = await fetch_one(
                conn,
                "SELECT * FROM run_queue WHERE session_id = ? AND state = 'queued' "
                "ORDER BY id LIMIT 1",
                (session_id,),
            )
            if session.state not in ("idle", "failed") or waiting is not None:
                queued = None if waiting is None else queue_row(waiting)
                return EnqueueOutcome(item=None, session=session, waiting=queued)
            cursor = await conn.execute(
                "INSERT INTO run_queue (session_id, channel_id, requester, text, message_ts, "
                "state, enqueued_at) VALUES (?, ?, ?, ?, ?, 'queued', ?)",
                (session_id, session.channel_id, requester, text, message_ts, self._now()),
            )
            row = await fetch_one(conn, "SELECT * FROM run_queue WHERE id = ?", (cursor.lastrowid,))
            assert row is not None
            return EnqueueOutcome(item=queue_row(row), session=session)

    async def claim_queued(self, channel_id: str, *, limit: int) -> QueueItem | None:
        """Start the channel's oldest queued message if fewer than `limit` of the channel's
        sessions are running or resuming (paused runs waiting for approval do not count).

        One transaction: the item becomes `started` and its session `running` with the item's
        requester, so concurrent dispatchers (tasks or processes) never exceed the limit and
        never start an item twice. None when the channel is full or nothing waits.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit!r}")
        async with self._transaction("claim_queued") as conn:
            busy = await fetch_one(
                conn,
                "SELECT COUNT(*) FROM sessions WHERE channel_id = ? "
                "AND state IN ('running', 'resuming')",
                (channel_id,),
            )
            if busy is not None and int(busy[0]) >= limit:
                return None
            row = await fetch_one(
                conn,
                "SELECT q.* FROM run_queue AS q JOIN sessions AS s ON s.id = q.session_id "
                "WHERE q.channel_id = ? AND q.state = 'queued' AND s.state IN ('idle', 'failed') "
                "ORDER BY q.id LIMIT 1",
                (channel_id,),
            )
            if row is None:
                return None
            item = queue_row(row)
            now = self._now()
            seq = await fetch_one(
                conn,
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?",
                (item.session_id,),
            )
            await conn.execute(
                "UPDATE run_queue SET state = 'started', started_at = ?, history_seq = ? "
                "WHERE id = ? AND state = 'queued'",
                (now, 0 if seq is None else int(seq[0]), item.id),
            )
            cursor = await conn.execute(
                "UPDATE sessions SET state = 'running', requester = ?, error = NULL, "
                "updated_at = ? WHERE id = ? AND state IN ('idle', 'failed')",
                (item.requester, now, item.session_id),
            )
            if cursor.rowcount != 1:  # the SELECT above joined on this very condition
                raise StoreError(f"session {item.session_id!r} changed under claim_queued")
            started = await fetch_one(conn, "SELECT * FROM run_queue WHERE id = ?", (item.id,))
            assert started is not None
            return queue_row(started)

    async def release_queued(self, item_id: int) -> None:
        """Undo `claim_queued` for a run that could not be started (the bot is shutting down)."""
        async with self._transaction("release_queued") as conn:
            row = await fetch_one(conn, "SELECT * FROM run_queue WHERE id = ?", (item_id,))
            if row is None or row["state"] != "started":
                return
            await conn.execute(
                "UPDATE run_queue SET state = 'queued', started_at = NULL, history_seq = NULL "
                "WHERE id = ?",
                (item_id,),
            )
            await conn.execute(
                "UPDATE sessions SET state = 'idle', updated_at = ? "
                "WHERE id = ? AND state = 'running'",
                (self._now(), row["session_id"]),
            )

    async def finish_queued(self, item_id: int) -> None:
        """The item's run ended (answered, failed or paused for approval)."""
        async with self._transaction("finish_queued") as conn:
            await conn.execute(
                "UPDATE run_queue SET state = 'done', finished_at = ? "
                "WHERE id = ? AND state = 'started'",
                (self._now(), item_id),
            )

    async def cancel_queued(self, session_id: str, *, user_id: str) -> QueueItem | None:
        """Withdraw the thread's queued message before its run starts; None if none waits."""
        async with self._transaction("cancel_queued") as conn:
            row = await fetch_one(
                conn,
                "SELECT * FROM run_queue WHERE session_id = ? AND state = 'queued' "
                "ORDER BY id LIMIT 1",
                (session_id,),
            )
            if row is None:
                return None
            await conn.execute(
                "UPDATE run_queue SET state = 'cancelled', finished_at = ? "
                "WHERE id = ? AND state = 'queued'",
                (self._now(), row["id"]),
            )
            await self._write_audit(
                conn,
                "cancel",
                actor=user_id,
                session_id=session_id,
                details={"queue_item": row["id"], "requester": row["requester"], "via": "queue"},
            )
            updated = await fetch_one(conn, "SELECT * FROM run_queue WHERE id = ?", (row["id"],))
            assert updated is not None
            return queue_row(updated)

    async def queued_item(self, session_id: str) -> QueueItem | None:
        """The thread's message waiting in the queue, if any."""
        async with self._reading("queued_item") as conn:
            row = await fetch_one(
                conn,
                "SELECT * FROM run_queue WHERE session_id = ? AND state = 'queued' "
                "ORDER BY id LIMIT 1",
                (session_id,),
            )
        return None if row is None else queue_row(row)

    async def queue_position(self, item_id: int) -> int | None:
        """How many messages of the same channel are queued ahead; None if no longer queued."""
        async with self._reading("queue_position") as conn:
            row = await fetch_one(conn, "SELECT * FROM run_queue WHERE id = ?", (item_id,))
            if row is None or row["state"] != "queued":
                return None
            ahead = await fetch_one(
                conn,
                "SELECT COUNT(*) FROM run_queue WHERE channel_id = ? AND state = 'queued' "
                "AND id < ?",
                (row["channel_id"], item_id),
            )
        return 0 if ahead is None else int(ahead[0])

    async def queue_items(
        self, *, channel_id: str | None = None, states: Collection[str] | None = None
    ) -> list[QueueItem]:
        """Queue items in arrival order, optionally of one channel and in some states."""
        sql, params = "SELECT * FROM run_queue WHERE 1 = 1", []
        if channel_id is not None:
            sql += " AND channel_id = ?"
            params.append(channel_id)
        if states is not None:
            sql += f" AND state IN ({', '.join('?' for _ in states)})"
            params.extend(states)
        async with self._reading("queue_items") as conn:
            rows = await fetch_all(conn, sql + " ORDER BY id", params)
        return [queue_row(row) for row in rows]

    async def queued_channels(self) -> list[str]:
        """Channels with messages waiting, the longest-waiting first."""
        async with self._reading("queued_channels") as conn:
            rows = await fetch_all(
                conn,
                "SELECT channel_id FROM run_queue WHERE state = 'queued' "
                "GROUP BY channel_id ORDER BY MIN(id)",
            )
        return [str(row[0]) for row in rows]

    async def requeue_interrupted(self) -> list[QueueItem]:
        """At start-up, before `recover()`: items whose run was started but had not yet stored
        its first message when OpsGate stopped go back to the queue (nothing of them happened,
        so nothing is lost or done twice); the other started items are marked done, and
        `recover()` handles their sessions. Returns the requeued items."""
        requeued: list[QueueItem] = []
        async with self._transaction("requeue_interrupted") as conn:
            started = [
                queue_row(row)
                for row in await fetch_all(
                    conn, "SELECT * FROM run_queue WHERE state = 'started' ORDER BY id"
                )
            ]
            now = self._now()
            for item in started:
                stored = await fetch_one(
                    conn,
                    "SELECT 1 FROM messages WHERE session_id = ? AND seq >= ? LIMIT 1",
                    (item.session_id, item.history_seq or 0),
                )
                if stored is not None:
                    await conn.execute(
                        "UPDATE run_queue SET state = 'done', finished_at = ? WHERE id = ?",
                        (now, item.id),
                    )
                    continue
                await conn.execute(
                    "UPDATE run_queue SET state = 'queued', started_at = NULL, history_seq = NULL "
                    "WHERE id = ?",
                    (item.id,),
                )
                await conn.execute(
                    "UPDATE sessions SET state = 'idle', updated_at = ? "
                    "WHERE id = ? AND state IN ('running', 'resuming')",
                    (now, item.session_id),
                )
                row = await fetch_one(conn, "SELECT * FROM run_queue WHERE id = ?", (item.id,))
                assert row is not None
                requeued.append(queue_row(row))
        return requeued
