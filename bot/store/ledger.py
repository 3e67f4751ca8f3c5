"""The tool-call ledger: a paused batch's rows, each call's execution marks, its card, and its
expiry and reminder.

`record_pause`, `start_tool_call` and `finish_tool_call` are what `agent_core.SessionStore` asks
of a store beyond the history. The `executing` mark is committed before a tool runs, so a call
never runs twice (a crash leaves it `interrupted`, see `recovery.py`).

`RecordedCalls` reads the ledger back for `opsgate policy replay`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agent_core.approvals import ToolApprovalResponse
from agent_core.exceptions import ToolCallAlreadyStarted
from agent_core.messages import (
    ChatMessage,
    ToolApprovalRequest,
    ToolCall,
    ToolCallHeld,
    call_digest,
    canonical_arguments,
)
from bot.words import format_duration

from .core import StoreCore
from .db import Row, Tx, aware
from .errors import LateResult, StoreError, UnknownCall
from .models import AllowanceRow, CardLock, ToolCallRow
from .rules import card_state, new_id, responses, start_audit

__all__ = ["Ledger", "RecordedCall", "RecordedCalls"]

_BY_CALL = (
    "SELECT * FROM tool_calls WHERE session_id = :session_id AND message_seq = :seq "
    "AND call_id = :call_id"
)


def _check_pause(message: ChatMessage, requests: Sequence[ToolApprovalRequest]) -> None:
    ids = [call.id for call in message.tool_calls]
    stray = sorted({request.call_id for request in requests} - set(ids))
    if stray:
        raise StoreError(f"approval requests name calls the message does not hold: {stray!r}")
    if len(set(ids)) != len(ids):
        raise StoreError(f"the message repeats a tool call id: {ids!r}")


class Ledger(StoreCore):
    async def record_pause(
        self,
        session_id: str,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None:
        """In one transaction: the assistant message, a `pending` ledger row per call (gated or
        held), a new batch, the pause transition (-> awaiting_approval) and a "request" audit
        row per gated call. A request naming a call the message lacks, or a message repeating a
        call id, is a `StoreError` that writes nothing."""
        _check_pause(message, requests)
        gated = {request.call_id: request for request in requests}
        async with self._db.transaction("record_pause") as tx:
            session = await self._session(tx, session_id, lock=True)
            requester = session["requester"]
            seq = await self._append(tx, session_id, [message])
            batch_id, now = new_id(), self._now()
            rows: list[dict[str, Any]] = []
            for position, call in enumerate(message.tool_calls):
                request = gated.get(call.id)
                shown = call.display_arguments()
                rows.append(
                    {
                        "id": new_id(),
                        "session_id": session_id,
                        "batch_id": batch_id,
                        "seq": seq,
                        "position": position,
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": canonical_arguments(shown),
                        "digest": request.digest if request else call_digest(call.name, shown),
                        "gated": request is not None,
                        "requester": requester,
                        "now": now,
                    }
                )
            await tx.execute_many(
                "INSERT INTO tool_calls (id, session_id, batch_id, message_seq, position, call_id, "
                "name, arguments, digest, needs_approval, status, requested_by, created_at) "
                "VALUES (:id, :session_id, :batch_id, :seq, :position, :call_id, :name, "
                ":arguments, :digest, :gated, 'pending', :requester, :now)",
                rows,
            )
            # The pause transition: from whatever the run was in, to awaiting its decisions.
            await tx.execute(
                "UPDATE sessions SET state = 'awaiting_approval', batch_id = :batch_id, "
                "error = NULL, instance_id = NULL, updated_at = :now WHERE id = :id",
                {"batch_id": batch_id, "now": now, "id": session_id},
            )
            for row in rows:
                if row["gated"]:
                    await self._write_audit(
                        tx,
                        "request",
                        actor=requester,
                        session_id=session_id,
                        call_id=row["call_id"],
                        details={
                            "ledger_id": row["id"],
                            "batch_id": batch_id,
                            "tool": row["name"],
                            "arguments": row["arguments"],
                            "digest": row["digest"],
                        },
                    )

    async def _insert_unpaused(
        self, tx: Tx, session: Row, seq: int, call: ToolCall
    ) -> tuple[str, str]:
        """The ledger row of a call of a round that did not pause, born `executing`."""
        position = await tx.fetch_value(
            "SELECT COUNT(*) FROM tool_calls WHERE session_id = :id AND message_seq = :seq",
            {"id": session["id"], "seq": seq},
        )
        shown = call.display_arguments()
        ledger_id, digest, now = new_id(), call_digest(call.name, shown), self._now()
        await tx.execute(
            "INSERT INTO tool_calls (id, session_id, batch_id, message_seq, position, call_id, "
            "name, arguments, digest, needs_approval, status, requested_by, instance_id, "
            "created_at, started_at) VALUES (:id, :session_id, NULL, :seq, :position, "
            ":call_id, :name, :arguments, :digest, false, 'executing', :requester, :instance, "
            ":now, :now)",
            {
                "id": ledger_id,
                "session_id": session["id"],
                "seq": seq,
                "position": int(position or 0),
                "call_id": call.id,
                "name": call.name,
                "arguments": canonical_arguments(shown),
                "digest": digest,
                "requester": session["requester"],
                "instance": self._instance_id,
                "now": now,
            },
        )
        return ledger_id, digest

    async def start_tool_call(self, session_id: str, call: ToolCall) -> None:
        """Mark the call of the latest tool-call message `executing` and commit before it runs.

        Conditional: allowed from `approved`, or `pending` for a held call; a call of a round
        that did not pause gets its row here. Otherwise `ToolCallAlreadyStarted` (audited as a
        "refusal"): a call never runs twice. Audited "execution_start".

        Notes which instance runs the call; refused (and audited) for a call already past
        `approved`, whichever replica asks."""
        refused: str | None = None
        async with self._db.transaction("start_tool_call") as tx:
            session = await self._session(tx, session_id, lock=True)
            seq = session["last_calls_seq"]
            if seq is None:
                raise UnknownCall(call.id, session_id)
            row = await tx.fetch_one(
                _BY_CALL + self._db.for_update,
                {"session_id": session_id, "seq": seq, "call_id": call.id},
            )
            decided_by: str | None = None
            if row is None:
                ledger_id, digest = await self._insert_unpaused(tx, session, seq, call)
            else:
                current = self._call_model(row)
                ledger_id, digest, decided_by = current.id, current.digest, current.decided_by
                touched = await tx.execute(
                    "UPDATE tool_calls SET status = 'executing', started_at = :now, "
                    "instance_id = :instance WHERE id = :id AND (status = 'approved' "
                    "OR (status = 'pending' AND NOT needs_approval))",
                    {"now": self._now(), "instance": self._instance_id, "id": ledger_id},
                )
                if touched == 0:
                    refused = current.status
            event, details = start_audit(call.name, ledger_id, digest, decided_by, refused)
            await self._write_audit(
                tx,
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
        """In one transaction: the `executing` call `done` with its result, and its tool message
        appended; audited "execution_end". A call not executing is a `StoreError`. With
        redraws owed, a carded call's redraw commits with its result (the card says "ran")."""
        late = carded = False
        async with self._db.transaction("finish_tool_call") as tx:
            session = await self._session(tx, session_id, lock=True)
            row = await tx.fetch_one(
                _BY_CALL + self._db.for_update,
                {"session_id": session_id, "seq": session["last_calls_seq"], "call_id": call.id},
            )
            if row is None:
                raise UnknownCall(call.id, session_id)
            current = self._call_model(row)
            if current.status == "interrupted":
                await self._record_result(tx, session, current, message, is_error, late=True)
                late = True
            elif current.status != "executing":
                raise StoreError(
                    f"tool call {call.id!r} of session {session_id!r} is {current.status}, "
                    "not executing; its result was not recorded"
                )
            else:
                await self._record_result(tx, session, current, message, is_error, late=False)
                # The card says what happened ("ran", how it ended): its redraw commits with
                # the result; one still unsent (the decision's) is superseded, not doubled.
                await self._owe_redraw(tx, current)
                carded = bool(current.card_ts and current.needs_approval)
        if late:
            raise LateResult(call.id, session_id)
        if carded:
            self._redraws_owed()

    async def _record_result(
        self,
        tx: Any,
        session: Any,
        current: ToolCallRow,
        message: ChatMessage,
        is_error: bool,
        *,
        late: bool,
    ) -> None:
        """The result on the row and its `execution_end` audit row. On time, the row is done
        and the result appended to the history; `late` (a stalled replica's call that was
        reported interrupted meanwhile), the row stays `interrupted` and nothing is appended:
        the history already answers the call as interrupted."""
        done = "" if late else "status = 'done', "
        await tx.execute(
            f"UPDATE tool_calls SET {done}result = :result, is_error = :is_error, "
            "finished_at = :now WHERE id = :id",
            {"result": message.content, "is_error": is_error, "now": self._now(), "id": current.id},
        )
        if not late:
            await self._append(tx, current.session_id, [message])
        details: dict[str, Any] = {
            "ledger_id": current.id,
            "tool": current.name,
            "is_error": is_error,
            "result_chars": len(message.content or ""),
        }
        if late:
            details |= {"late": True, "status": "interrupted"}
        await self._write_audit(
            tx,
            "execution_end",
            actor=session["requester"],
            session_id=current.session_id,
            call_id=current.call_id,
            details=details,
        )

    # -- reading the ledger ------------------------------------------------------------------------

    async def get_call(self, ledger_id: str) -> ToolCallRow | None:
        async with self._db.reading("get_call") as tx:
            row = await tx.fetch_one("SELECT * FROM tool_calls WHERE id = :id", {"id": ledger_id})
        return None if row is None else self._call_model(row)

    async def find_call(self, session_id: str, call_id: str) -> ToolCallRow | None:
        """The latest ledger row for a provider call id in a session (ids may repeat later)."""
        async with self._db.reading("find_call") as tx:
            row = await tx.fetch_one(
                "SELECT * FROM tool_calls WHERE session_id = :session_id AND call_id = :call_id "
                "ORDER BY message_seq DESC LIMIT 1",
                {"session_id": session_id, "call_id": call_id},
            )
        return None if row is None else self._call_model(row)

    async def batch_calls(self, session_id: str) -> list[ToolCallRow]:
        """The rows of the session's latest paused batch, in the model's order."""
        async with self._db.reading("batch_calls") as tx:
            rows = await tx.fetch_all(
                "SELECT t.* FROM tool_calls AS t JOIN sessions AS s ON t.batch_id = s.batch_id "
                "WHERE s.id = :id ORDER BY t.position",
                {"id": session_id},
            )
        return [self._call_model(row) for row in rows]

    async def responses_for_batch(self, session_id: str) -> list[ToolApprovalResponse]:
        """The decisions of the latest batch's gated calls, as the resume needs them; deciders
        named by the store's `person`."""
        return responses(await self.batch_calls(session_id), self._person)

    # -- cards -------------------------------------------------------------------------------------

    async def set_card(
        self, ledger_id: str, channel: str, ts: str, *, locked: CardLock | None = None
    ) -> None:
        """Where the call's card was posted, and why it may not be approved (`locked`, None:
        it may). `UnknownCall` for an unknown id."""
        async with self._db.transaction("set_card") as tx:
            touched = await tx.execute(
                "UPDATE tool_calls SET card_channel = :channel, card_ts = :ts, "
                "card_locked = :locked WHERE id = :id",
                {"channel": channel, "ts": ts, "locked": locked, "id": ledger_id},
            )
            if touched == 0:
                raise UnknownCall(ledger_id)

    async def card_drawn(self, ledger_id: str, drawn: str) -> None:
        """The card now shows `drawn` (`card_state` of the row it was drawn from)."""
        async with self._db.transaction("card_drawn") as tx:
            await tx.execute(
                "UPDATE tool_calls SET card_drawn = :drawn WHERE id = :id",
                {"drawn": drawn, "id": ledger_id},
            )

    async def stale_cards(self) -> list[ToolCallRow]:
        """Posted cards that still show buttons (or old progress) for a call that has moved on,
        e.g. after a crash between a cancel and the redraw: start-up redraws them."""
        async with self._db.reading("stale_cards") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM tool_calls WHERE card_ts IS NOT NULL AND needs_approval "
                "AND (card_drawn IS NULL OR card_drawn LIKE 'pending:%') "
                # A redraw the outbox owes is sent by it (drawn from the call's state then).
                "AND NOT EXISTS (SELECT 1 FROM outbox WHERE outbox.key = 'card:' || tool_calls.id) "
                "ORDER BY created_at, position"
            )
        calls = [self._call_model(row) for row in rows]
        return [c for c in calls if c.card_drawn != card_state(c)]

    # -- expiry and reminders ----------------------------------------------------------------------

    async def note_trace(self, session_id: str, trace_id: str, span_id: str) -> None:
        """Store the paused run's span ids with the calls of the session's current batch."""
        async with self._db.transaction("note_trace") as tx:
            await tx.execute(
                "UPDATE tool_calls SET trace_id = :trace_id, span_id = :span_id WHERE batch_id = "
                "(SELECT batch_id FROM sessions WHERE id = :id)",
                {"trace_id": trace_id, "span_id": span_id, "id": session_id},
            )

    async def set_expiry(
        self, ledger_id: str, expires_at: datetime, *, ttl: str | None = None
    ) -> None:
        """When an undecided gated call expires; `ttl` in words defaults to the time left now,
        rounded. `UnknownCall` for an unknown id."""
        words = ttl or format_duration(aware(expires_at) - self._moment(), approximate=True)
        async with self._db.transaction("set_expiry") as tx:
            touched = await tx.execute(
                "UPDATE tool_calls SET expires_at = :at, ttl = :ttl WHERE id = :id",
                {"at": self._db.time_in(expires_at), "ttl": words, "id": ledger_id},
            )
            if touched == 0:
                raise UnknownCall(ledger_id)

    async def expire_due(self, now: datetime | None = None) -> list[ToolCallRow]:
        """Expire every undecided gated call whose time is up (audited "expiry" each).

        Rows another replica is deciding or expiring right now are skipped (it handles them)."""
        moment = aware(now) if now is not None else self._moment()
        async with self._db.transaction("expire_due") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM tool_calls WHERE status = 'pending' AND needs_approval "
                "AND expires_at IS NOT NULL AND expires_at <= :now ORDER BY expires_at"
                + self._db.skip_locked,
                {"now": self._db.time_in(moment)},
            )
            expired = [await self._expire(tx, self._call_model(row), moment) for row in rows]
        if expired:
            self._redraws_owed()
        return expired

    async def due_reminders(
        self, before: timedelta, now: datetime | None = None
    ) -> list[ToolCallRow]:
        """Undecided gated calls expiring within `before`, not reminded of yet; marks them
        (audited "reminder"), so each reminder goes out once across all stores."""
        moment = aware(now) if now is not None else self._moment()
        reminded: list[ToolCallRow] = []
        async with self._db.transaction("due_reminders") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM tool_calls WHERE status = 'pending' AND needs_approval "
                "AND reminded_at IS NULL AND expires_at IS NOT NULL "
                "AND expires_at > :now AND expires_at <= :until ORDER BY expires_at"
                + self._db.skip_locked,
                {"now": self._db.time_in(moment), "until": self._db.time_in(moment + before)},
            )
            for row in rows:
                update = "UPDATE tool_calls SET reminded_at = :now WHERE id = :id"
                values = {"now": self._db.time_in(moment)}
                reminded.append(
                    await self._mark(tx, self._call_model(row), "reminder", update, values)
                )
        return reminded

    async def next_expiry(self) -> datetime | None:
        """When the next undecided gated call expires (a sweeper's sleep)."""
        async with self._db.reading("next_expiry") as tx:
            value = await tx.fetch_value(
                "SELECT MIN(expires_at) FROM tool_calls WHERE status = 'pending' "
                "AND needs_approval AND expires_at IS NOT NULL"
            )
        return self._db.time_out(value)


# -- the ledger read back for a replay ---------------------------------------------------------
# Every recorded call of a window with where and by whom it was asked, and the allowances of
# that window. Reads only: a replay never writes a row.


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One call of the ledger, as a replay judges it again."""

    id: str
    """The ledger id (what the audit log's `call_id` and a card's buttons carry)."""
    tool: str
    arguments: str
    """Canonical JSON, as recorded."""
    at: datetime
    channel_id: str
    requester: str | None


class RecordedCalls(StoreCore):
    async def recorded_calls(self, *, since: datetime) -> list[RecordedCall]:
        """The ledger's calls created at or after `since`, oldest first, with their channel
        and requester (for `opsgate policy replay`; reads only)."""
        async with self._db.reading("recorded_calls", snapshot=True) as tx:
            rows = await tx.fetch_all(
                "SELECT t.id, t.name, t.arguments, t.created_at, t.requested_by, "
                "s.channel_id, s.requester FROM tool_calls t "
                "JOIN sessions s ON s.id = t.session_id "
                "WHERE t.created_at >= :since ORDER BY t.created_at, t.id",
                {"since": self._db.time_in(aware(since))},
            )
        time_out = self._db.time_out
        return [
            RecordedCall(
                id=r[0],
                tool=r[1],
                arguments=r[2],
                at=time_out(r[3]) or aware(since),
                channel_id=r[5],
                requester=r[4] or r[6],
            )
            for r in rows
        ]

    async def allowances_since(self, since: datetime) -> list[AllowanceRow]:
        """Every allowance in force at some moment after `since` (revoked ones included: a
        replay needs what held then), oldest first."""
        async with self._db.reading("allowances_since") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM allowances WHERE expires_at > :since ORDER BY created_at, id",
                {"since": self._db.time_in(aware(since))},
            )
        return [AllowanceRow.model_validate(dict(r)) for r in rows]
