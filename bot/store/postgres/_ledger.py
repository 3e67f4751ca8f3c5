"""The tool-call ledger: pauses, execution marks, results, cards and expiry times."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agent_core.events import ToolApprovalRequest, ToolCallHeld
from agent_core.exceptions import ToolCallAlreadyStarted
from agent_core.messages import ChatMessage, ToolCall, call_digest, canonical_arguments
from bot.words import format_duration

from .._rules import card_state, new_id, start_audit
from .._time import aware
from ..errors import StoreError, UnknownCall
from ..models import ToolCallRow
from ..states import CardLock
from ._base import Connection
from ._rows import call_row, count
from ._sessions import Sessions

__all__ = ["Ledger"]

_BY_CALL = "SELECT * FROM tool_calls WHERE session_id = $1 AND message_seq = $2 AND call_id = $3"


class Ledger(Sessions):
    async def record_pause(
        self,
        session_id: str,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None:
        """In one transaction: the assistant message, a ledger row per call, the new batch, the
        session's `awaiting_approval` state, and a "request" audit row per gated call."""
        gated = {request.call_id: request for request in requests}
        ids = [call.id for call in message.tool_calls]
        stray = sorted(set(gated) - set(ids))
        if stray:
            raise StoreError(f"approval requests name calls the message does not hold: {stray!r}")
        if len(set(ids)) != len(ids):
            raise StoreError(f"the message repeats a tool call id: {ids!r}")
        async with self._transaction("record_pause") as conn:
            session = await self._session_record(conn, session_id, lock=True)
            requester = session["requester"]
            seq = await self._append(conn, session_id, [message])
            batch_id, now = new_id(), self._now()
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
                        request is not None,
                        requester,
                        now,
                    )
                )
            await conn.executemany(
                "INSERT INTO tool_calls (id, session_id, batch_id, message_seq, position, call_id, "
                "name, arguments, digest, needs_approval, status, requested_by, created_at) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12)",
                rows,
            )
            await conn.execute(
                "UPDATE sessions SET state = 'awaiting_approval', batch_id = $1, error = NULL, "
                "instance_id = NULL, updated_at = $2 WHERE id = $3",
                batch_id,
                now,
                session_id,
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

    async def _insert_unpaused(
        self, conn: Connection, session: Any, seq: int, call: ToolCall
    ) -> tuple[str, str]:
        """The ledger row of a call from a round that did not pause, created `executing`."""
        position = await conn.fetchval(
            "SELECT COUNT(*) FROM tool_calls WHERE session_id = $1 AND message_seq = $2",
            session["id"],
            seq,
        )
        shown = call.display_arguments()
        ledger_id, digest, now = new_id(), call_digest(call.name, shown), self._now()
        await conn.execute(
            "INSERT INTO tool_calls (id, session_id, batch_id, message_seq, position, call_id, "
            "name, arguments, digest, needs_approval, status, requested_by, instance_id, "
            "created_at, started_at) "
            "VALUES ($1, $2, NULL, $3, $4, $5, $6, $7, $8, false, 'executing', $9, $10, $11, $11)",
            ledger_id,
            session["id"],
            seq,
            int(position or 0),
            call.id,
            call.name,
            canonical_arguments(shown),
            digest,
            session["requester"],
            self._instance_id,
            now,
        )
        return ledger_id, digest

    async def start_tool_call(self, session_id: str, call: ToolCall) -> None:
        """Mark the call `executing` (noting which instance runs it) and commit, before it runs.

        Allowed from `approved`, or `pending` for a call that needs no approval; a call of a round
        that did not pause gets its row here. Anything else raises `ToolCallAlreadyStarted` (and
        is audited as a refusal): the call must not run twice, whichever replica asks.
        """
        refused: str | None = None
        async with self._transaction("start_tool_call") as conn:
            session = await self._session_record(conn, session_id, lock=True)
            seq = session["last_calls_seq"]
            if seq is None:
                raise UnknownCall(call.id, session_id)
            row = await conn.fetchrow(_BY_CALL + " FOR UPDATE", session_id, seq, call.id)
            decided_by: str | None = None
            if row is None:
                ledger_id, digest = await self._insert_unpaused(conn, session, seq, call)
            else:
                current = call_row(row)
                ledger_id, digest, decided_by = current.id, current.digest, current.decided_by
                status = await conn.execute(
                    "UPDATE tool_calls SET status = 'executing', started_at = $1, "
                    "instance_id = $2 WHERE id = $3 AND (status = 'approved' "
                    "OR (status = 'pending' AND NOT needs_approval))",
                    self._now(),
                    self._instance_id,
                    ledger_id,
                )
                if count(status) == 0:
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

    async def finish_tool_call(
        self, session_id: str, call: ToolCall, message: ChatMessage, *, is_error: bool
    ) -> None:
        """In one transaction: the call `done` with its result, and its tool message appended."""
        async with self._transaction("finish_tool_call") as conn:
            session = await self._session_record(conn, session_id, lock=True)
            row = await conn.fetchrow(
                _BY_CALL + " FOR UPDATE", session_id, session["last_calls_seq"], call.id
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
                "UPDATE tool_calls SET status = 'done', result = $1, is_error = $2, "
                "finished_at = $3 WHERE id = $4",
                message.content,
                is_error,
                self._now(),
                current.id,
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

    async def get_call(self, ledger_id: str) -> ToolCallRow | None:
        async with self._reading("get_call") as conn:
            row = await conn.fetchrow("SELECT * FROM tool_calls WHERE id = $1", ledger_id)
        return None if row is None else call_row(row)

    async def find_call(self, session_id: str, call_id: str) -> ToolCallRow | None:
        """The latest ledger row for a provider call id in a session."""
        async with self._reading("find_call") as conn:
            row = await conn.fetchrow(
                "SELECT * FROM tool_calls WHERE session_id = $1 AND call_id = $2 "
                "ORDER BY message_seq DESC LIMIT 1",
                session_id,
                call_id,
            )
        return None if row is None else call_row(row)

    async def batch_calls(self, session_id: str) -> list[ToolCallRow]:
        """The rows of the session's latest paused batch, in the model's order."""
        async with self._reading("batch_calls") as conn:
            rows = await conn.fetch(
                "SELECT t.* FROM tool_calls AS t JOIN sessions AS s ON t.batch_id = s.batch_id "
                "WHERE s.id = $1 ORDER BY t.position",
                session_id,
            )
        return [call_row(row) for row in rows]

    async def set_card(
        self, ledger_id: str, channel: str, ts: str, *, locked: CardLock | None = None
    ) -> None:
        """Where the call's Approve/Reject card was posted, so it can be updated later."""
        async with self._transaction("set_card") as conn:
            status = await conn.execute(
                "UPDATE tool_calls SET card_channel = $1, card_ts = $2, card_locked = $3 "
                "WHERE id = $4",
                channel,
                ts,
                locked,
                ledger_id,
            )
            if count(status) == 0:
                raise UnknownCall(ledger_id)

    async def card_drawn(self, ledger_id: str, drawn: str) -> None:
        async with self._transaction("card_drawn") as conn:
            await conn.execute(
                "UPDATE tool_calls SET card_drawn = $1 WHERE id = $2", drawn, ledger_id
            )

    async def stale_cards(self) -> list[ToolCallRow]:
        async with self._reading("stale_cards") as conn:
            rows = await conn.fetch(
                "SELECT * FROM tool_calls WHERE card_ts IS NOT NULL AND needs_approval "
                "AND (card_drawn IS NULL OR card_drawn LIKE 'pending:%') "
                "ORDER BY created_at, position"
            )
        calls = [call_row(row) for row in rows]
        return [c for c in calls if c.card_drawn != card_state(c)]

    async def set_expiry(
        self, ledger_id: str, expires_at: datetime, *, ttl: str | None = None
    ) -> None:
        """When an undecided gated call expires; `ttl` in words defaults to the time left now."""
        words = ttl or format_duration(aware(expires_at) - self._now(), approximate=True)
        async with self._transaction("set_expiry") as conn:
            status = await conn.execute(
                "UPDATE tool_calls SET expires_at = $1, ttl = $2 WHERE id = $3",
                aware(expires_at),
                words,
                ledger_id,
            )
            if count(status) == 0:
                raise UnknownCall(ledger_id)
