"""Repairing what a crash (or a stopped run) left behind.

A call that was `executing` may have had effects, so it is never run again: it becomes
`interrupted`, and its batch is closed (`agent_core.approvals.close_batch`) so every
`tool_call_id` has its answer and the history stays valid for the provider.

Whose work is left over differs by database, and the two variants stand side by side in
`_orphaned`: an SQLite file is held by one serving process, so at its start-up everything
left is a dead process's; on PostgreSQL only the work of replicas whose lease lapsed (or of no
replica) is, and recovery holds an advisory lock so two survivors never repair the same work.
"""

from __future__ import annotations

from agent_core.approvals import close_batch
from agent_core.messages import CallOutcome, Interrupted, NotRun, ToolCall, render_outcome

from .core import StoreCore
from .db import Tx
from .models import InboxItem, QueueItem, RecoveredSession, ToolCallRow
from .rules import interruption_audits, resume_never_began, runs_again

__all__ = ["RECOVER_LOCK", "Recovery"]

RECOVER_LOCK = 0x0F5_5AFE
"""Advisory lock key held by recovery, so two survivors never repair the same work."""

_LAPSED = (
    "({t}.instance_id IS NULL OR NOT EXISTS (SELECT 1 FROM instances AS i "
    "WHERE i.id = {t}.instance_id "
    "AND i.heartbeat_at + i.lease_seconds * interval '1 second' > :now)) "
    "AND (CAST(:me AS text) IS NULL OR {t}.instance_id IS DISTINCT FROM :me)"
)
"""PostgreSQL: work whose owner's lease lapsed (never this store's own instance's)."""


class Recovery(StoreCore):
    def _orphaned(self, table: str) -> str:
        """The condition on `table` (an alias) for work no live process owns."""
        if self._db.dialect == "sqlite":
            return "1 = 1"  # the file's one serving process is this one: the rest is a dead one's
        return _LAPSED.format(t=table)

    async def requeue_interrupted(self) -> list[QueueItem]:
        """At start-up, before `recover`: started items whose run stored nothing go back to the
        queue (their sessions to idle), and so do those whose run `runs_again` (stored its
        message, no call reached `executing`), keeping `history_seq`: the claim that starts
        one says `rerun`. The others are marked done (`recover` tells their threads)."""
        requeued: list[QueueItem] = []
        async with self._db.transaction("requeue_interrupted") as tx:
            await self._db.advisory_lock(tx, RECOVER_LOCK)
            now = self._now()
            mine = {"now": now, "me": self._instance_id}
            started = await tx.fetch_all(
                "SELECT q.* FROM run_queue AS q WHERE q.state = 'started' AND "
                + self._orphaned("q")
                + " ORDER BY q.id",
                mine,
            )
            items = list(map(self._queue_model, started))
            # Every session first, in order, then the audit chain's head (as in `recover`).
            states = {
                sid: str((await self._session(tx, sid, lock=True))["state"])
                for sid in sorted({item.session_id for item in items})
            }
            for item in items:
                seq = item.history_seq or 0
                tail = await self._latest_batch_messages(tx, item.session_id, seq)
                if not tail:  # it had not begun: back to the queue, as it came
                    requeued.append(await self._requeue(tx, item, keep_history=False))
                elif runs_again(states[item.session_id], tail, await self._began(tx, item)):
                    requeued.append(await self._requeue(tx, item, keep_history=True))
                    await self._write_audit(
                        tx,
                        "run_requeued",
                        actor=None,
                        session_id=item.session_id,
                        details={"queue_item": item.id, "history_seq": seq},
                    )
                else:  # `recover` tells its thread
                    await tx.execute(
                        "UPDATE run_queue SET state = 'done', finished_at = :now WHERE id = :id",
                        {"now": now, "id": item.id},
                    )
        return requeued

    async def _began(self, tx: Tx, item: QueueItem) -> bool:
        """Whether a call of the item's run reached `executing` (it may have had effects)."""
        found = await tx.fetch_value(
            "SELECT 1 FROM tool_calls WHERE session_id = :id AND message_seq >= :seq "
            "AND status IN ('executing', 'done', 'interrupted') LIMIT 1",
            {"id": item.session_id, "seq": item.history_seq or 0},
        )
        return found is not None

    async def _requeue(self, tx: Tx, item: QueueItem, *, keep_history: bool) -> QueueItem:
        """Put a started item back in the queue and its session back to idle. `keep_history`:
        its message is stored, so the next start answers the history from `history_seq` on
        instead of adding the message again (`QueueItem.rerun`)."""
        history = "history_seq" if keep_history else "NULL"
        row = await tx.fetch_one(
            "UPDATE run_queue SET state = 'queued', started_at = NULL, "
            f"history_seq = {history}, instance_id = NULL WHERE id = :id RETURNING *",
            {"id": item.id},
        )
        await tx.execute(
            "UPDATE sessions SET state = 'idle', instance_id = NULL, updated_at = :now "
            "WHERE id = :id AND state IN ('running', 'resuming')",
            {"now": self._now(), "id": item.session_id},
        )
        return self._queue_model(row)

    async def recover(self) -> list[RecoveredSession]:
        """Once at start-up: `executing` calls become `interrupted` (never run again), their
        batches are closed (interrupted / not run), and sessions left running or resuming
        become idle; paused sessions are left alone. Audited "interrupted"."""
        recovered: list[RecoveredSession] = []
        async with self._db.transaction("recover") as tx:
            await self._db.advisory_lock(tx, RECOVER_LOCK)
            mine = {"now": self._now(), "me": self._instance_id}
            executing = [
                self._call_model(row)
                for row in await tx.fetch_all(
                    "SELECT t.* FROM tool_calls AS t WHERE t.status = 'executing' AND "
                    + self._orphaned("t")
                    + " ORDER BY t.session_id, t.message_seq, t.position",
                    mine,
                )
            ]
            stuck = await tx.fetch_all(
                "SELECT s.id FROM sessions AS s WHERE s.state IN ('running', 'resuming') AND "
                + self._orphaned("s")
                + " ORDER BY s.id",
                mine,
            )
            started = {row.session_id for row in executing}
            waiting = [row[0] for row in stuck if row[0] not in started]
            # Every session first, in order, then the audit chain's head (the first audit row
            # locks it): the order every other writer takes, so none waits on us in a cycle.
            for session_id in sorted(started | {row[0] for row in stuck}):
                await self._session(tx, session_id, lock=True)
            reclaimed = {sid for sid in waiting if await self._reclaim_resume(tx, sid)}
            for session_id in sorted(started | {row[0] for row in stuck} - reclaimed):
                mine_here = [row for row in executing if row.session_id == session_id]
                recovered.append(await self._recover_session(tx, session_id, mine_here))
        return recovered

    async def stop_run(
        self, session_id: str, *, why: str, by: str | None = None
    ) -> RecoveredSession | None:
        """running|resuming -> idle for a run this process stopped (cancelled, or past its
        deadline), conditional: None if the session was not going. Exactly as recovery after a
        crash: `executing` calls become `interrupted` (never run again), the batch's other
        open calls are answered "Not run" (`close_batch`); audited as `run_stopped`."""
        async with self._db.transaction("stop_run") as tx:
            session = await self._session(tx, session_id, lock=True)
            if session["state"] not in ("running", "resuming"):
                return None
            executing = [
                self._call_model(row)
                for row in await tx.fetch_all(
                    "SELECT * FROM tool_calls WHERE session_id = :id AND status = 'executing' "
                    "ORDER BY message_seq, position",
                    {"id": session_id},
                )
            ]
            await self._write_audit(
                tx,
                "run_stopped",
                actor=by,
                session_id=session_id,
                details={"why": why, "interrupted": [row.id for row in executing]},
            )
            return await self._recover_session(tx, session_id, executing)

    async def _reclaim_resume(self, tx: Tx, session_id: str) -> bool:
        """A decided batch of which nothing ran goes back to awaiting_approval, so its resume
        is claimed again, once, and runs it (docs/architecture.md)."""
        session = await self._session(tx, session_id, lock=True)
        rows = [
            self._call_model(row)
            for row in await tx.fetch_all(
                "SELECT * FROM tool_calls WHERE batch_id = :batch_id ORDER BY position",
                {"batch_id": session["batch_id"]},
            )
        ]
        seq = session["last_calls_seq"]
        tail = await self._latest_batch_messages(tx, session_id, seq)
        if session["batch_id"] is None or not resume_never_began(rows, tail, seq):
            return False
        await tx.execute(
            "UPDATE sessions SET state = 'awaiting_approval', instance_id = NULL, "
            "updated_at = :now WHERE id = :id",
            {"now": self._now(), "id": session_id},
        )
        await self._write_audit(
            tx,
            "resume_reclaimed",
            actor=None,
            session_id=session_id,
            details={"previous_state": session["state"], "batch_id": session["batch_id"]},
        )
        return True

    async def _recover_session(
        self, tx: Tx, session_id: str, interrupted: list[ToolCallRow]
    ) -> RecoveredSession:
        session = await self._session(tx, session_id, lock=True)
        now = self._now()
        for row in interrupted:
            await tx.execute(
                "UPDATE tool_calls SET status = 'interrupted', result = :result, "
                "is_error = true, finished_at = :now WHERE id = :id AND status = 'executing'",
                {"result": render_outcome(Interrupted()), "now": now, "id": row.id},
            )
        seq = session["last_calls_seq"]
        was_running = {row.call_id for row in interrupted if row.message_seq == seq}
        not_run: list[str] = []

        def outcome(call: ToolCall) -> CallOutcome:
            if call.id in was_running:
                return Interrupted()
            not_run.append(call.id)
            return NotRun()

        answers = close_batch(await self._latest_batch_messages(tx, session_id, seq), outcome)
        if answers:
            await self._append(tx, session_id, answers)
        await tx.execute(
            "UPDATE sessions SET state = 'idle', error = NULL, instance_id = NULL, "
            "updated_at = :now WHERE id = :id",
            {"now": now, "id": session_id},
        )
        for call_id, details in interruption_audits(session["state"], interrupted, not_run):
            await self._write_audit(
                tx,
                "interrupted",
                actor=None,
                session_id=session_id,
                call_id=call_id,
                details=details,
            )
        return RecoveredSession(
            session=self._session_model(await self._session(tx, session_id)),
            interrupted=[await self._call(tx, row.id) for row in interrupted],
            not_run=not_run,
        )

    async def inbox_recover(self) -> list[InboxItem]:
        """At start-up: claim the unprocessed rows of processes that are gone (SQLite: every
        one, the file being exclusive; PostgreSQL: those of instances whose lease lapsed),
        oldest first. Conditional: each row is claimed by one store, however many recover."""
        async with self._db.transaction("inbox_recover") as tx:
            await self._db.advisory_lock(tx, RECOVER_LOCK)
            if self._db.dialect == "sqlite":
                # `claimed` rows too when this store holds the file: their claimer is gone.
                claimed = "b.state = 'claimed'" if self._db.exclusive else "1 = 0"
            else:
                # A row claimed by a store holding no lease is never claimed again: nothing
                # would tell whether its claimer is gone.
                claimed = "(b.state = 'claimed' AND b.instance_id IS NOT NULL)"
            rows = await tx.fetch_all(
                "UPDATE inbox AS b SET state = 'claimed', instance_id = :me "
                f"WHERE (b.state = 'received' OR {claimed}) AND "
                + self._orphaned("b")
                + " RETURNING *",
                {"now": self._now(), "me": self._instance_id},
            )
        items = [
            InboxItem(
                id=r["id"],
                kind=r["kind"],
                payload=self._db.json_out(r["payload"]),
                received_at=r["received_at"],
            )
            for r in rows
        ]
        return sorted(items, key=lambda item: item.id)
