"""The run queue: messages waiting for a free slot in their channel, shared by all replicas.

`claim_queued` holds a per-channel advisory lock for its transaction, so the count of busy
sessions and the claim that follows it are one step even when several replicas dispatch.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..errors import StoreError
from ..models import EnqueueOutcome, QueueItem
from ._base import Connection
from ._decisions import Decisions
from ._rows import queue_item, session_row

__all__ = ["QUEUE_LOCK", "Queue"]

QUEUE_LOCK = 0x0F5_0E0E
"""First key of the per-channel advisory lock (the second is the channel id's hash)."""

_QUEUED_OF_SESSION = (
    "SELECT * FROM run_queue WHERE session_id = $1 AND state = 'queued' ORDER BY id LIMIT 1"
)


class Queue(Decisions):
    async def enqueue(
        self,
        session_id: str,
        *,
        requester: str,
        text: str,
        message_ts: str | None = None,
    ) -> EnqueueOutcome:
        """Queue a message that should start a run in its session, unless the session is busy
        (its run active or paused, or another message of the thread already queued)."""
        async with self._transaction("enqueue") as conn:
            session = session_row(await self._session_record(conn, session_id, lock=True))
            waiting = await conn.fetchrow(_QUEUED_OF_SESSION, session_id)
            if session.state not in ("idle", "failed") or waiting is not None:
                return EnqueueOutcome(
                    item=None,
                    session=session,
                    waiting=None if waiting is None else queue_item(waiting),
                )
            row = await conn.fetchrow(
                "INSERT INTO run_queue (session_id, channel_id, requester, text, message_ts, "
                "state, enqueued_at) VALUES ($1, $2, $3, $4, $5, 'queued', $6) RETURNING *",
                session_id,
                session.channel_id,
                requester,
                text,
                message_ts,
                self._now(),
            )
            return EnqueueOutcome(item=queue_item(row), session=session)

    async def _start_item(self, conn: Connection, candidate: Any) -> QueueItem | None:
        """Start one candidate under its session's lock; None if it changed meanwhile."""
        session = await self._session_record(conn, candidate["session_id"], lock=True)
        if session["state"] not in ("idle", "failed"):
            return None
        now = self._now()
        seq = await conn.fetchval(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = $1", session["id"]
        )
        row = await conn.fetchrow(
            "UPDATE run_queue SET state = 'started', started_at = $1, history_seq = $2, "
            "instance_id = $3 WHERE id = $4 AND state = 'queued' RETURNING *",
            now,
            int(seq),
            self._instance_id,
            candidate["id"],
        )
        if row is None:
            return None
        await conn.execute(
            "UPDATE sessions SET state = 'running', requester = $1, error = NULL, "
            "instance_id = $2, updated_at = $3 WHERE id = $4",
            row["requester"],
            self._instance_id,
            now,
            session["id"],
        )
        return queue_item(row)

    async def claim_queued(self, channel_id: str, *, limit: int) -> QueueItem | None:
        """Start the channel's oldest queued message if fewer than `limit` of the channel's
        sessions are running or resuming (paused runs do not count); never exceeds the limit
        nor starts an item twice, however many replicas dispatch. None when full or empty."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit!r}")
        async with self._transaction("claim_queued") as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))", QUEUE_LOCK, channel_id
            )
            busy = await conn.fetchval(
                "SELECT COUNT(*) FROM sessions WHERE channel_id = $1 "
                "AND state IN ('running', 'resuming')",
                channel_id,
            )
            if int(busy) >= limit:
                return None
            candidates = await conn.fetch(
                "SELECT q.id, q.session_id FROM run_queue AS q "
                "JOIN sessions AS s ON s.id = q.session_id WHERE q.channel_id = $1 "
                "AND q.state = 'queued' AND s.state IN ('idle', 'failed') ORDER BY q.id LIMIT 3",
                channel_id,
            )
            for candidate in candidates:
                started = await self._start_item(conn, candidate)
                if started is not None:
                    return started
            return None

    async def release_queued(self, item_id: int) -> None:
        """Undo `claim_queued` for a run that could not be started (the bot is shutting down)."""
        async with self._transaction("release_queued") as conn:
            row = await conn.fetchrow("SELECT * FROM run_queue WHERE id = $1", item_id)
            if row is None or row["state"] != "started":
                return
            await self._session_record(conn, row["session_id"], lock=True)
            status = await conn.execute(
                "UPDATE run_queue SET state = 'queued', started_at = NULL, history_seq = NULL, "
                "instance_id = NULL WHERE id = $1 AND state = 'started'",
                item_id,
            )
            if status.endswith(" 0"):
                return
            await conn.execute(
                "UPDATE sessions SET state = 'idle', instance_id = NULL, updated_at = $1 "
                "WHERE id = $2 AND state = 'running'",
                self._now(),
                row["session_id"],
            )

    async def finish_queued(self, item_id: int) -> None:
        """The item's run ended (answered, failed or paused for approval)."""
        async with self._transaction("finish_queued") as conn:
            await conn.execute(
                "UPDATE run_queue SET state = 'done', finished_at = $1 "
                "WHERE id = $2 AND state = 'started'",
                self._now(),
                item_id,
            )

    async def cancel_queued(self, session_id: str, *, user_id: str) -> QueueItem | None:
        """Withdraw the thread's queued message before its run starts; None if none waits."""
        async with self._transaction("cancel_queued") as conn:
            await self._session_record(conn, session_id, lock=True)
            waiting = await conn.fetchrow(_QUEUED_OF_SESSION, session_id)
            if waiting is None:
                return None
            row = await conn.fetchrow(
                "UPDATE run_queue SET state = 'cancelled', finished_at = $1 "
                "WHERE id = $2 AND state = 'queued' RETURNING *",
                self._now(),
                waiting["id"],
            )
            if row is None:
                raise StoreError(f"queue item {waiting['id']!r} changed under cancel_queued")
            await self._write_audit(
                conn,
                "cancel",
                actor=user_id,
                session_id=session_id,
                details={"queue_item": row["id"], "requester": row["requester"], "via": "queue"},
            )
            return queue_item(row)

    async def queued_item(self, session_id: str) -> QueueItem | None:
        """The thread's message waiting in the queue, if any."""
        async with self._reading("queued_item") as conn:
            row = await conn.fetchrow(_QUEUED_OF_SESSION, session_id)
        return None if row is None else queue_item(row)

    async def queue_position(self, item_id: int) -> int | None:
        """How many messages of the same channel are queued ahead; None if no longer queued."""
        async with self._reading("queue_position") as conn:
            row = await conn.fetchrow("SELECT * FROM run_queue WHERE id = $1", item_id)
            if row is None or row["state"] != "queued":
                return None
            ahead = await conn.fetchval(
                "SELECT COUNT(*) FROM run_queue WHERE channel_id = $1 AND state = 'queued' "
                "AND id < $2",
                row["channel_id"],
                item_id,
            )
        return int(ahead)

    async def queue_items(
        self, *, channel_id: str | None = None, states: Collection[str] | None = None
    ) -> list[QueueItem]:
        """Queue items in arrival order, optionally of one channel and in some states."""
        async with self._reading("queue_items") as conn:
            rows = await conn.fetch(
                "SELECT * FROM run_queue WHERE ($1::text IS NULL OR channel_id = $1) "
                "AND ($2::text[] IS NULL OR state = ANY($2::text[])) ORDER BY id",
                channel_id,
                None if states is None else list(states),
            )
        return [queue_item(row) for row in rows]

    async def queued_channels(self) -> list[str]:
        """Channels with messages waiting, the longest-waiting first."""
        async with self._reading("queued_channels") as conn:
            rows = await conn.fetch(
                "SELECT channel_id FROM run_queue WHERE state = 'queued' "
                "GROUP BY channel_id ORDER BY MIN(id)"
            )
        return [str(row[0]) for row in rows]
