"""Cancelling a paused run: its batch is closed without running anything of it.

Closing answers every `tool_call_id` of the batch (`agent_core.batches.close_batch`), so the
history stays valid for the provider; `_rules.cancel_outcome` says what each call is told.
"""

from __future__ import annotations

import aiosqlite

from agent_core.batches import close_batch

from .._rules import cancel_outcome, cancel_refusal
from ..models import CancelOutcome, ToolCallRow
from ._connection import SQLiteConnection, call_row, fetch_all

__all__ = ["CancelPart"]


class CancelPart(SQLiteConnection):
    async def cancel_batch(
        self,
        session_id: str,
        *,
        user_id: str,
        batch_id: str | None = None,
        team_id: str | None = None,
        via: str = "message",
        rule: str | None = None,
    ) -> CancelOutcome:
        who = self._person(user_id)
        async with self._transaction("cancel_batch") as conn:
            session = await self._session_row(conn, session_id)
            current = session["batch_id"]
            why = cancel_refusal(batch_id, current, session["state"], moved=False)
            if why is None:
                cursor = await conn.execute(
                    "UPDATE sessions SET state = 'idle', error = NULL, updated_at = ? "
                    "WHERE id = ? AND state = 'awaiting_approval' AND batch_id IS ?",
                    (self._now(), session_id, current),
                )
                why = cancel_refusal(None, None, session["state"], moved=cursor.rowcount == 0)
            before = [
                call_row(row)
                for row in await fetch_all(
                    conn,
                    "SELECT * FROM tool_calls WHERE batch_id = ? ORDER BY position",
                    (batch_id if batch_id is not None else current,),
                )
            ]
            if why is not None:
                await self._write_audit(
                    conn,
                    "refusal",
                    actor=user_id,
                    session_id=session_id,
                    details={
                        "action": "cancel",
                        "via": via,
                        "why": why.kind,
                        "rule": rule,
                        "batch_id": batch_id if batch_id is not None else current,
                        "ledger_ids": [r.id for r in before if r.needs_approval],
                    },
                )
                return CancelOutcome(cancelled=False, rows=before, why=why)

            for row in before:
                if row.status in ("pending", "approved"):
                    await self._cancel_row(conn, row, user_id, team_id, f"cancelled by {who}")
                    await self._write_audit(
                        conn,
                        "cancel",
                        actor=user_id,
                        session_id=session_id,
                        call_id=row.call_id,
                        details={
                            "ledger_id": row.id,
                            "batch_id": row.batch_id,
                            "tool": row.name,
                            "digest": row.digest,
                            "previous_status": row.status,
                            "via": via,
                            "rule": rule,
                        },
                    )
            tail = await self._latest_batch_messages(conn, session_id, session["last_calls_seq"])
            outcome = cancel_outcome({row.call_id: row for row in before}, who, self._person)
            answers = close_batch(tail, outcome)
            if answers:
                await self._append(conn, session_id, answers)
            after = [await self._call_row(conn, row.id) for row in before]
            return CancelOutcome(cancelled=True, rows=after)

    async def _cancel_row(
        self,
        conn: aiosqlite.Connection,
        row: ToolCallRow,
        user_id: str,
        team_id: str | None,
        reason: str,
    ) -> None:
        await conn.execute(
            "UPDATE tool_calls SET status = 'cancelled', decided_by = ?, decided_team = ?, "
            "decided_at = ?, reason = ? WHERE id = ? AND status = ?",
            (user_id, team_id, self._now(), reason, row.id, row.status),
        )
