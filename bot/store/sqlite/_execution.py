"""The agent's half of the ledger: a paused batch's rows, and each call's execution marks.

These three writes are what `agent_core.SessionStore` asks of a store beyond the history. The
`executing` mark is committed before a tool runs, so a call can never run twice (a crash leaves
it `interrupted`, see `_recovery.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite

from agent_core.events import ToolApprovalRequest, ToolCallHeld
from agent_core.exceptions import ToolCallAlreadyStarted
from agent_core.messages import ChatMessage, ToolCall, call_digest, canonical_arguments

from .._rules import new_id, start_audit
from ..errors import StoreError, UnknownCall
from ._connection import SQLiteConnection, call_row, fetch_one

__all__ = ["ExecutionPart"]


def _check_pause(message: ChatMessage, requests: Sequence[ToolApprovalRequest]) -> None:
    ids = [call.id for call in message.tool_calls]
    stray = sorted({request.call_id for request in requests} - set(ids))
    if stray:
        raise StoreError(f"approval requests name calls the message does not hold: {stray!r}")
    if len(set(ids)) != len(ids):
        raise StoreError(f"the message repeats a tool call id: {ids!r}")


class ExecutionPart(SQLiteConnection):
    async def record_pause(
        self,
        session_id: str,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None:
        _check_pause(message, requests)
        gated = {request.call_id: request for request in requests}
        async with self._transaction("record_pause") as conn:
            session = await self._session_row(conn, session_id)
            requester = session["requester"]
            seq = await self._append(conn, session_id, [message])
            batch_id = new_id()
            now = self._now()
            rows: list[tuple[Any, ...]] = []
            for position, call in enumerate(message.tool_calls):
                request = gated.get(call.id)
                shown = call.display_arguments()
                digest = request.digest if request else call_digest(call.name, shown)
                rows.append(
                    (
                        new_id(),
                        session_id,
                        batch_id,
                        seq,
                        position,
                        call.id,
                        call.name,
                        canonical_arguments(shown),
                        digest,
                        int(request is not None),
                        requester,
                        now,
                    )
                )
            await conn.executemany(
                "INSERT INTO tool_calls (id, session_id, batch_id, message_seq, position, call_id, "
                "name, arguments, digest, needs_approval, status, requested_by, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
                rows,
            )
            # The pause transition: from whatever the run was in, to awaiting its decisions.
            await conn.execute(
                "UPDATE sessions SET state = 'awaiting_approval', batch_id = ?, error = NULL, "
                "updated_at = ? WHERE id = ?",
                (batch_id, now, session_id),
            )
            for row in rows:
                if row[9]:
                    await self._write_audit(
                        conn,
                        "request",
                        actor=requester,
                        session_id=session_id,
                        call_id=row[5],
                        details={
                            "ledger_id": row[0],
                            "batch_id": batch_id,
                            "tool": row[6],
                            "arguments": row[7],
                            "digest": row[8],
                        },
                    )

    async def start_tool_call(self, session_id: str, call: ToolCall) -> None:
        refused: str | None = None
        async with self._transaction("start_tool_call") as conn:
            session = await self._session_row(conn, session_id)
            seq = session["last_calls_seq"]
            if seq is None:
                raise UnknownCall(call.id, session_id)
            row = await fetch_one(
                conn,
                "SELECT * FROM tool_calls WHERE session_id = ? AND message_seq = ? AND call_id = ?",
                (session_id, seq, call.id),
            )
            now = self._now()
            if row is None:
                ledger_id, digest = await self._insert_unpaused(
                    conn, session_id, seq, call, session["requester"], now
                )
                decided_by = None
            else:
                current = call_row(row)
                ledger_id, digest, decided_by = current.id, current.digest, current.decided_by
                cursor = await conn.execute(
                    "UPDATE tool_calls SET status = 'executing', started_at = ? WHERE id = ? "
                    "AND (status = 'approved' OR (status = 'pending' AND needs_approval = 0))",
                    (now, ledger_id),
                )
                if cursor.rowcount == 0:
                    refused = current.status
            event, details = start_audit(call.name, ledger_id, digest, decided_by, refused)
            await self._write_audit(
                conn,
                event,
                actor=session["requester"],
                session_id=session_id,
                call_id=call.id,
                details=details,
            )
        if refused is not None:
            raise ToolCallAlreadyStarted(call.id, refused)

    async def _insert_unpaused(
        self,
        conn: aiosqlite.Connection,
        session_id: str,
        seq: int,
        call: ToolCall,
        requester: str | None,
        now: str,
    ) -> tuple[str, str]:
        """The ledger row of a call of a round that did not pause, born `executing`."""
        count = await fetch_one(
            conn,
            "SELECT COUNT(*) FROM tool_calls WHERE session_id = ? AND message_seq = ?",
            (session_id, seq),
        )
        shown = call.display_arguments()
        ledger_id, digest = new_id(), call_digest(call.name, shown)
        await conn.execute(
            "INSERT INTO tool_calls (id, session_id, batch_id, message_seq, position, "
            "call_id, name, arguments, digest, needs_approval, status, requested_by, "
            "created_at, started_at) "
            "VALUES (?, ?, NULL, ?, ?, ?, ?, ?, ?, 0, 'executing', ?, ?, ?)",
            (
                ledger_id,
                session_id,
                seq,
                0 if count is None else int(count[0]),
                call.id,
                call.name,
                canonical_arguments(shown),
                digest,
                requester,
                now,
                now,
            ),
        )
        return ledger_id, digest

    async def finish_tool_call(
        self, session_id: str, call: ToolCall, message: ChatMessage, *, is_error: bool
    ) -> None:
        async with self._transaction("finish_tool_call") as conn:
            session = await self._session_row(conn, session_id)
            row = await fetch_one(
                conn,
                "SELECT * FROM tool_calls WHERE session_id = ? AND message_seq = ? AND call_id = ?",
                (session_id, session["last_calls_seq"], call.id),
            )
            if row is None:
                raise UnknownCall(call.id, session_id)
            current = call_row(row)
            if current.status != "executing":
                raise StoreError(
                    f"tool call {call.id!r} of session {session_id!r} is {current.status}, "
                    "not executing; its result was not recorded"
                )
            await conn.execute(
                "UPDATE tool_calls SET status = 'done', result = ?, is_error = ?, finished_at = ? "
                "WHERE id = ?",
                (message.content, int(is_error), self._now(), current.id),
            )
            await self._append(conn, session_id, [message])
            await self._write_audit(
                conn,
                "execution_end",
                actor=session["requester"],
                session_id=session_id,
                call_id=call.id,
                details={
                    "ledger_id": current.id,
                    "tool": current.name,
                    "is_error": is_error,
                    "result_chars": len(message.content or ""),
                },
            )
