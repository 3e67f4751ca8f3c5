"""Repairing what a crash left behind, once at start-up before serving.

A call that was `executing` may have had effects, so it is never run again: it becomes
`interrupted`, and its batch is closed (`agent_core.batches.close_batch`) so every
`tool_call_id` has its answer and the history stays valid for the provider.
"""

from __future__ import annotations

import sqlite3

import aiosqlite

from agent_core.batches import close_batch
from agent_core.messages import ToolCall
from agent_core.outcomes import CallOutcome, Interrupted, NotRun, render_outcome

from .._rules import interruption_audits, resume_never_began
from ..models import RecoveredSession, ToolCallRow
from ._connection import SQLiteConnection, call_row, fetch_all, session_row

__all__ = ["RecoveryPart"]


class RecoveryPart(SQLiteConnection):
    async def recover(self) -> list[RecoveredSession]:
        async with self._transaction("recover") as conn:
            executing = [
                call_row(row)
                for row in await fetch_all(
                    conn,
                    "SELECT * FROM tool_calls WHERE status = 'executing' "
                    "ORDER BY session_id, message_seq, position",
                )
            ]
            stuck = await fetch_all(
                conn, "SELECT id FROM sessions WHERE state IN ('running', 'resuming') ORDER BY id"
            )
            started = {row.session_id for row in executing}
            waiting = [row[0] for row in stuck if row[0] not in started]
            reclaimed = {sid for sid in waiting if await self._reclaim_resume(conn, sid)}
            session_ids = sorted(started | {row[0] for row in stuck} - reclaimed)
            return [
                await self._recover_session(
                    conn, session_id, [row for row in executing if row.session_id == session_id]
                )
                for session_id in session_ids
            ]

    async def stop_run(
        self, session_id: str, *, why: str, by: str | None = None
    ) -> RecoveredSession | None:
        async with self._transaction("stop_run") as conn:
            session = await self._session_row(conn, session_id)
            if session["state"] not in ("running", "resuming"):
                return None
            executing = [
                call_row(row)
                for row in await fetch_all(
                    conn,
                    "SELECT * FROM tool_calls WHERE session_id = ? AND status = 'executing' "
                    "ORDER BY message_seq, position",
                    (session_id,),
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

    async def _reclaim_resume(self, conn: aiosqlite.Connection, session_id: str) -> bool:
        """A decided batch of which nothing ran goes back to awaiting_approval, so its resume
        is claimed again and runs it (docs/architecture.md)."""
        session = await self._session_row(conn, session_id)
        rows = [
            call_row(row)
            for row in await fetch_all(
                conn,
                "SELECT * FROM tool_calls WHERE batch_id = ? ORDER BY position",
                (session["batch_id"],),
            )
        ]
        seq = session["last_calls_seq"]
        tail = await self._latest_batch_messages(conn, session_id, seq)
        if session["batch_id"] is None or not resume_never_began(rows, tail, seq):
            return False
        await conn.execute(
            "UPDATE sessions SET state = 'awaiting_approval', updated_at = ? WHERE id = ?",
            (self._now(), session_id),
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
        self, conn: aiosqlite.Connection, session_id: str, interrupted: list[ToolCallRow]
    ) -> RecoveredSession:
        session = await self._session_row(conn, session_id)
        now = self._now()
        text = render_outcome(Interrupted())
        for row in interrupted:
            await conn.execute(
                "UPDATE tool_calls SET status = 'interrupted', result = ?, is_error = 1, "
                "finished_at = ? WHERE id = ?",
                (text, now, row.id),
            )
        not_run = await self._close_after_crash(conn, session, interrupted)
        await conn.execute(
            "UPDATE sessions SET state = 'idle', error = NULL, updated_at = ? WHERE id = ?",
            (now, session_id),
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
            session=session_row(await self._session_row(conn, session_id)),
            interrupted=[await self._call_row(conn, row.id) for row in interrupted],
            not_run=not_run,
        )

    async def _close_after_crash(
        self, conn: aiosqlite.Connection, session: sqlite3.Row, interrupted: list[ToolCallRow]
    ) -> list[str]:
        """Answer the latest batch's open calls; returns the ids answered "Not run"."""
        seq = session["last_calls_seq"]
        was_running = {row.call_id for row in interrupted if row.message_seq == seq}
        not_run: list[str] = []

        def outcome(call: ToolCall) -> CallOutcome:
            if call.id in was_running:
                return Interrupted()
            not_run.append(call.id)
            return NotRun()

        tail = await self._latest_batch_messages(conn, session["id"], seq)
        answers = close_batch(tail, outcome)
        if answers:
            await self._append(conn, session["id"], answers)
        return not_run
