"""Replica leases and crash recovery.

Each replica registers an instance and renews its lease with `heartbeat()`. Recovery (at start-up,
and periodically on a survivor) touches only the work of instances whose lease lapsed (or that
released it, or of no instance at all): their `executing` calls become `interrupted` and are never
run again, their `running`/`resuming` sessions become `idle`, and their started-but-unstored queue
items go back to the queue. Work of live replicas is left alone.
"""

from __future__ import annotations

from datetime import timedelta

from agent_core.batches import close_batch
from agent_core.messages import ToolCall
from agent_core.outcomes import CallOutcome, Interrupted, NotRun, render_outcome

from .._rules import interruption_audits, new_id, resume_never_began
from ..errors import StoreError
from ..models import QueueItem, RecoveredSession, ToolCallRow
from ._base import Connection
from ._queue import Queue
from ._rows import call_row, count, queue_item, session_row

__all__ = ["DEFAULT_LEASE", "RECOVER_LOCK", "Recovery"]

DEFAULT_LEASE = timedelta(seconds=20)
"""Well under a minute, so a survivor tells the thread about an interrupted call promptly."""

RECOVER_LOCK = 0x0F5_5AFE
"""Advisory lock key held by recovery, so two survivors never repair the same work."""

_ORPHAN = (
    "({t}.instance_id IS NULL OR NOT EXISTS (SELECT 1 FROM instances AS i "
    "WHERE i.id = {t}.instance_id "
    "AND i.heartbeat_at + i.lease_seconds * interval '1 second' > $1)) "
    "AND ($2::text IS NULL OR {t}.instance_id IS DISTINCT FROM $2)"
)
"""Work whose owner's lease lapsed ($1: now, $2: this store's own instance, never an orphan)."""


class Recovery(Queue):
    @property
    def instance_id(self) -> str | None:
        """This store's registered instance, if any."""
        return self._instance_id

    async def register_instance(
        self, *, lease: timedelta = DEFAULT_LEASE, name: str | None = None
    ) -> str:
        """Register this process as a replica holding a lease; the store then notes it on the
        work it starts. Returns the instance id."""
        if lease <= timedelta(0):
            raise ValueError(f"lease must be positive, not {lease!r}")
        if self._instance_id is not None:
            raise StoreError(f"store {self.name!r} already registered {self._instance_id!r}")
        instance_id, now = new_id(), self._now()
        async with self._transaction("register_instance") as conn:
            await conn.execute(
                "INSERT INTO instances (id, name, started_at, heartbeat_at, lease_seconds) "
                "VALUES ($1, $2, $3, $3, $4)",
                instance_id,
                name,
                now,
                lease.total_seconds(),
            )
        self._instance_id = instance_id
        return instance_id

    async def heartbeat(self) -> bool:
        """Renew the lease; False if the instance is gone (released, or never registered)."""
        if self._instance_id is None:
            return False
        async with self._transaction("heartbeat") as conn:
            status = await conn.execute(
                "UPDATE instances SET heartbeat_at = $1 WHERE id = $2",
                self._now(),
                self._instance_id,
            )
        return count(status) == 1

    async def release(self) -> None:
        """Give the lease up (after in-flight work finished): survivors may recover at once."""
        instance_id, self._instance_id = self._instance_id, None
        if instance_id is None:
            return
        async with self._transaction("release") as conn:
            await conn.execute("DELETE FROM instances WHERE id = $1", instance_id)

    async def requeue_interrupted(self) -> list[QueueItem]:
        """Before `recover()`: started items of lapsed instances whose run had not yet stored
        its first message go back to the queue; their other started items are marked done."""
        requeued: list[QueueItem] = []
        async with self._transaction("requeue_interrupted") as conn:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", RECOVER_LOCK)
            now = self._now()
            started = await conn.fetch(
                "SELECT q.* FROM run_queue AS q WHERE q.state = 'started' AND "
                + _ORPHAN.format(t="q")
                + " ORDER BY q.id",
                now,
                self._instance_id,
            )
            for item in map(queue_item, started):
                await self._session_record(conn, item.session_id, lock=True)
                stored = await conn.fetchval(
                    "SELECT 1 FROM messages WHERE session_id = $1 AND seq >= $2 LIMIT 1",
                    item.session_id,
                    item.history_seq or 0,
                )
                if stored is not None:
                    await conn.execute(
                        "UPDATE run_queue SET state = 'done', finished_at = $1 WHERE id = $2",
                        now,
                        item.id,
                    )
                    continue
                row = await conn.fetchrow(
                    "UPDATE run_queue SET state = 'queued', started_at = NULL, "
                    "history_seq = NULL, instance_id = NULL WHERE id = $1 RETURNING *",
                    item.id,
                )
                await conn.execute(
                    "UPDATE sessions SET state = 'idle', instance_id = NULL, updated_at = $1 "
                    "WHERE id = $2 AND state IN ('running', 'resuming')",
                    now,
                    item.session_id,
                )
                requeued.append(queue_item(row))
        return requeued

    async def recover(self) -> list[RecoveredSession]:
        """Repair what lapsed instances left behind (every instance's, without leases).

        Their `executing` calls become `interrupted` (answered "Interrupted", never
        run again), the other unanswered calls of that batch get "Not run", and their
        `running`/`resuming` sessions become `idle`. Sessions awaiting approval are left alone.
        """
        recovered: list[RecoveredSession] = []
        async with self._transaction("recover") as conn:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", RECOVER_LOCK)
            now = self._now()
            executing = [
                call_row(row)
                for row in await conn.fetch(
                    "SELECT t.* FROM tool_calls AS t WHERE t.status = 'executing' AND "
                    + _ORPHAN.format(t="t")
                    + " ORDER BY t.session_id, t.message_seq, t.position",
                    now,
                    self._instance_id,
                )
            ]
            stuck = await conn.fetch(
                "SELECT s.id FROM sessions AS s WHERE s.state IN ('running', 'resuming') AND "
                + _ORPHAN.format(t="s"),
                now,
                self._instance_id,
            )
            started = {row.session_id for row in executing}
            waiting = [row[0] for row in stuck if row[0] not in started]
            reclaimed = {sid for sid in waiting if await self._reclaim_resume(conn, sid)}
            session_ids = sorted(started | {row[0] for row in stuck} - reclaimed)
            for session_id in session_ids:
                mine = [row for row in executing if row.session_id == session_id]
                recovered.append(await self._recover_session(conn, session_id, mine))
        return recovered

    async def stop_run(
        self, session_id: str, *, why: str, by: str | None = None
    ) -> RecoveredSession | None:
        async with self._transaction("stop_run") as conn:
            session = await self._session_record(conn, session_id, lock=True)
            if session["state"] not in ("running", "resuming"):
                return None
            executing = [
                call_row(row)
                for row in await conn.fetch(
                    "SELECT * FROM tool_calls WHERE session_id = $1 AND status = 'executing' "
                    "ORDER BY message_seq, position",
                    session_id,
                )
            ]
            await self._write_audit(
                conn,
                "run_stopped",
                actor=by,
                session_id=session_id,
                details={"why": why, "interrupted": [row.id for row in executing]},
            )
            return await self._recover_session(conn, session_id, executing)

    async def _reclaim_resume(self, conn: Connection, session_id: str) -> bool:
        """A decided batch of which nothing ran goes back to awaiting_approval, so its resume
        is claimed again, once, and runs it (docs/architecture.md)."""
        session = await self._session_record(conn, session_id, lock=True)
        rows = [
            call_row(row)
            for row in await conn.fetch(
                "SELECT * FROM tool_calls WHERE batch_id = $1 ORDER BY position",
                session["batch_id"],
            )
        ]
        seq = session["last_calls_seq"]
        tail = await self._latest_batch_messages(conn, session_id, seq)
        if session["batch_id"] is None or not resume_never_began(rows, tail, seq):
            return False
        await conn.execute(
            "UPDATE sessions SET state = 'awaiting_approval', instance_id = NULL, "
            "updated_at = $1 WHERE id = $2",
            self._now(),
            session_id,
        )
        await self._write_audit(
            conn,
            "resume_reclaimed",
            actor=None,
            session_id=session_id,
            details={"previous_state": session["state"], "batch_id": session["batch_id"]},
        )
        return True

    async def _recover_session(
        self, conn: Connection, session_id: str, interrupted: list[ToolCallRow]
    ) -> RecoveredSession:
        session = await self._session_record(conn, session_id, lock=True)
        now = self._now()
        for row in interrupted:
            await conn.execute(
                "UPDATE tool_calls SET status = 'interrupted', result = $1, is_error = true, "
                "finished_at = $2 WHERE id = $3 AND status = 'executing'",
                render_outcome(Interrupted()),
                now,
                row.id,
            )
        seq = session["last_calls_seq"]
        was_running = {row.call_id for row in interrupted if row.message_seq == seq}
        not_run: list[str] = []

        def outcome(call: ToolCall) -> CallOutcome:
            if call.id in was_running:
                return Interrupted()
            not_run.append(call.id)
            return NotRun()

        answers = close_batch(await self._latest_batch_messages(conn, session_id, seq), outcome)
        if answers:
            await self._append(conn, session_id, answers)
        await conn.execute(
            "UPDATE sessions SET state = 'idle', error = NULL, instance_id = NULL, "
            "updated_at = $1 WHERE id = $2",
            now,
            session_id,
        )
        for call_id, details in interruption_audits(session["state"], interrupted, not_run):
            await self._write_audit(
                conn,
                "interrupted",
                actor=None,
                session_id=session_id,
                call_id=call_id,
                details=details,
            )
        return RecoveredSession(
            session=session_row(await self._session_record(conn, session_id)),
            interrupted=[await self._call(conn, row.id) for row in interrupted],
            not_run=not_run,
        )
