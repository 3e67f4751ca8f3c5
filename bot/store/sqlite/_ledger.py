"""The people's half of the ledger: reading calls, cards, decisions, expiry and reminders.

Every decision is a conditional update of a `pending` row, so the first writer wins whichever
process it is in; the loser is told who won and when (`_rules.already`).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Literal

import aiosqlite

from agent_core.approvals import ToolApprovalResponse
from bot._duration import format_duration

from .._rules import already, arguments_changed, card_state, expiry_ttl, responses
from .._time import aware, to_db
from ..errors import UnknownCall
from ..models import DecisionOutcome, PendingApproval, SessionRow, ToolCallRow
from ..reasons import AlreadyApprovedByYou, DecisionReason, MoreApprovalsNeeded, NeedsNoApproval
from ..states import CardLock
from ._connection import SQLiteConnection, call_row, fetch_all, fetch_one, session_row

__all__ = ["LedgerPart"]

_DRAWN_WITH_BUTTONS = (
    "SELECT * FROM tool_calls WHERE card_ts IS NOT NULL AND needs_approval = 1 "
    "AND (card_drawn IS NULL OR card_drawn LIKE 'pending:%')"
)
"""Cards last drawn pending (or never marked): the only ones that can show stale buttons."""
_DUE = (
    "SELECT * FROM tool_calls WHERE status = 'pending' AND needs_approval = 1 "
    "AND expires_at IS NOT NULL"
)


class LedgerPart(SQLiteConnection):
    async def get_call(self, ledger_id: str) -> ToolCallRow | None:
        async with self._reading("get_call") as conn:
            row = await fetch_one(conn, "SELECT * FROM tool_calls WHERE id = ?", (ledger_id,))
        return None if row is None else call_row(row)

    async def find_call(self, session_id: str, call_id: str) -> ToolCallRow | None:
        async with self._reading("find_call") as conn:
            row = await fetch_one(
                conn,
                "SELECT * FROM tool_calls WHERE session_id = ? AND call_id = ? "
                "ORDER BY message_seq DESC LIMIT 1",
                (session_id, call_id),
            )
        return None if row is None else call_row(row)

    async def batch_calls(self, session_id: str) -> list[ToolCallRow]:
        async with self._reading("batch_calls") as conn:
            rows = await fetch_all(
                conn,
                "SELECT t.* FROM tool_calls AS t JOIN sessions AS s ON t.batch_id = s.batch_id "
                "WHERE s.id = ? ORDER BY t.position",
                (session_id,),
            )
        return [call_row(row) for row in rows]

    async def set_card(
        self, ledger_id: str, channel: str, ts: str, *, locked: CardLock | None = None
    ) -> None:
        async with self._transaction("set_card") as conn:
            cursor = await conn.execute(
                "UPDATE tool_calls SET card_channel = ?, card_ts = ?, card_locked = ? WHERE id = ?",
                (channel, ts, locked, ledger_id),
            )
            if cursor.rowcount == 0:
                raise UnknownCall(ledger_id)

    async def card_drawn(self, ledger_id: str, drawn: str) -> None:
        async with self._transaction("card_drawn") as conn:
            await conn.execute(
                "UPDATE tool_calls SET card_drawn = ? WHERE id = ?", (drawn, ledger_id)
            )

    async def stale_cards(self) -> list[ToolCallRow]:
        async with self._reading("stale_cards") as conn:
            rows = await fetch_all(conn, f"{_DRAWN_WITH_BUTTONS} ORDER BY created_at, position")
        calls = [call_row(row) for row in rows]
        return [c for c in calls if c.card_drawn != card_state(c)]

    async def set_expiry(
        self, ledger_id: str, expires_at: datetime, *, ttl: str | None = None
    ) -> None:
        words = ttl or format_duration(aware(expires_at) - aware(self._clock()), approximate=True)
        async with self._transaction("set_expiry") as conn:
            cursor = await conn.execute(
                "UPDATE tool_calls SET expires_at = ?, ttl = ? WHERE id = ?",
                (to_db(expires_at), words, ledger_id),
            )
            if cursor.rowcount == 0:
                raise UnknownCall(ledger_id)

    # -- decisions -------------------------------------------------------------------------------

    async def decide(
        self,
        ledger_id: str,
        decision: Literal["approved", "rejected"],
        *,
        user_id: str,
        team_id: str | None = None,
        reason: str | None = None,
        required_approvals: int = 1,
        rule: str | None = None,
        policy_rule: str | None = None,
        digest: str | None = None,
    ) -> DecisionOutcome:
        if decision not in ("approved", "rejected"):
            raise ValueError(f"decision must be 'approved' or 'rejected', not {decision!r}")
        if required_approvals < 1:
            raise ValueError(f"required_approvals must be at least 1, not {required_approvals!r}")
        async with self._transaction("decide") as conn:
            return await self._decide_in(
                conn,
                ledger_id,
                decision,
                user_id=user_id,
                team_id=team_id,
                reason=reason,
                required_approvals=required_approvals,
                rule=rule,
                policy_rule=policy_rule,
                digest=digest,
            )

    async def _decide_in(
        self,
        conn: aiosqlite.Connection,
        ledger_id: str,
        decision: Literal["approved", "rejected"],
        *,
        user_id: str,
        team_id: str | None,
        reason: str | None,
        required_approvals: int,
        rule: str | None,
        policy_rule: str | None,
        digest: str | None,
    ) -> DecisionOutcome:
        """`decide` inside the caller's transaction (`allow_call` adds the allowance to it)."""
        row = await self._call_row(conn, ledger_id)
        clock = aware(self._clock())
        now = to_db(clock)
        if row.status == "pending" and row.needs_approval and _past(row, clock):
            row = await self._expire(conn, row, now)
        why = self._refusal(row, decision, user_id) or arguments_changed(row, digest)
        common = {
            "ledger_id": ledger_id,
            "tool": row.name,
            "digest": row.digest,
            "decision": decision,
            "rule": rule,
            "policy_rule": policy_rule,
            "reason": reason,
            "team_id": team_id,
        }
        if why is not None:
            await self._write_audit(
                conn,
                "refusal",
                actor=user_id,
                session_id=row.session_id,
                call_id=row.call_id,
                details={**common, "why": why.kind, "shown_digest": digest},
            )
            return DecisionOutcome(recorded=False, row=row, why=why)

        approvals = row.approvals
        final = True
        if decision == "approved":
            approvals = (*approvals, user_id)
            final = len(approvals) >= required_approvals
        if final:
            await conn.execute(
                "UPDATE tool_calls SET status = ?, decided_by = ?, decided_team = ?, "
                "decided_at = ?, reason = ?, approvals = ? WHERE id = ? AND status = 'pending'",
                (decision, user_id, team_id, now, reason, json.dumps(approvals), ledger_id),
            )
        else:
            await conn.execute(
                "UPDATE tool_calls SET approvals = ? WHERE id = ? AND status = 'pending'",
                (json.dumps(approvals), ledger_id),
            )
            why = MoreApprovalsNeeded(len(approvals), required_approvals)
        await self._write_audit(
            conn,
            "decision",
            actor=user_id,
            session_id=row.session_id,
            call_id=row.call_id,
            details={
                **common,
                "approvals": len(approvals),
                "required_approvals": required_approvals,
                "final": final,
            },
        )
        return DecisionOutcome(recorded=True, row=await self._call_row(conn, ledger_id), why=why)

    def _refusal(self, row: ToolCallRow, decision: str, user_id: str) -> DecisionReason | None:
        """Why a decision on `row` is not recorded, or None if it may be."""
        if not row.needs_approval:
            return NeedsNoApproval()
        if row.status != "pending":
            return already(row)
        if decision == "approved" and user_id in row.approvals:
            return AlreadyApprovedByYou()
        return None

    async def _expire(self, conn: aiosqlite.Connection, row: ToolCallRow, now: str) -> ToolCallRow:
        ttl = expiry_ttl(row)
        await conn.execute(
            "UPDATE tool_calls SET status = 'expired', decided_at = ?, ttl = ? "
            "WHERE id = ? AND status = 'pending'",
            (now, ttl, row.id),
        )
        await self._write_audit(
            conn,
            "expiry",
            actor=None,
            session_id=row.session_id,
            call_id=row.call_id,
            details={"ledger_id": row.id, "tool": row.name, "ttl": ttl},
        )
        return await self._call_row(conn, row.id)

    # -- expiry and reminders --------------------------------------------------------------------

    async def expire_due(self, now: datetime | None = None) -> list[ToolCallRow]:
        moment = to_db(now if now is not None else self._clock())
        async with self._transaction("expire_due") as conn:
            rows = await fetch_all(
                conn, f"{_DUE} AND expires_at <= ? ORDER BY expires_at", (moment,)
            )
            return [await self._expire(conn, call_row(row), moment) for row in rows]

    async def due_reminders(
        self, before: timedelta, now: datetime | None = None
    ) -> list[ToolCallRow]:
        moment = now if now is not None else self._clock()
        async with self._transaction("due_reminders") as conn:
            rows = await fetch_all(
                conn,
                f"{_DUE} AND reminded_at IS NULL AND expires_at > ? AND expires_at <= ? "
                "ORDER BY expires_at",
                (to_db(moment), to_db(moment + before)),
            )
            reminded = []
            for row in rows:
                call = call_row(row)
                await conn.execute(
                    "UPDATE tool_calls SET reminded_at = ? WHERE id = ?", (to_db(moment), call.id)
                )
                await self._write_audit(
                    conn,
                    "reminder",
                    actor=None,
                    session_id=call.session_id,
                    call_id=call.call_id,
                    details={"ledger_id": call.id, "tool": call.name},
                )
                reminded.append(await self._call_row(conn, call.id))
            return reminded

    async def next_expiry(self) -> datetime | None:
        async with self._reading("next_expiry") as conn:
            row = await fetch_one(
                conn,
                "SELECT MIN(expires_at) FROM tool_calls WHERE status = 'pending' "
                "AND needs_approval = 1 AND expires_at IS NOT NULL",
            )
        return None if row is None or row[0] is None else datetime.fromisoformat(row[0])

    # -- what the resume and the start-up need -----------------------------------------------------

    async def responses_for_batch(self, session_id: str) -> list[ToolApprovalResponse]:
        return responses(await self.batch_calls(session_id), self._person)

    async def pending_approvals(self) -> list[PendingApproval]:
        async with self._reading("pending_approvals") as conn:
            rows = await fetch_all(
                conn,
                "SELECT t.* FROM tool_calls AS t JOIN sessions AS s "
                "ON s.id = t.session_id AND s.batch_id = t.batch_id "
                "WHERE t.status = 'pending' AND t.needs_approval = 1 "
                "AND s.state = 'awaiting_approval' ORDER BY t.created_at, t.position",
            )
            calls = [call_row(row) for row in rows]
            sessions: dict[str, SessionRow] = {}
            for session_id in {c.session_id for c in calls}:
                sessions[session_id] = session_row(await self._session_row(conn, session_id))
        return [PendingApproval(call=c, session=sessions[c.session_id]) for c in calls]

    async def sessions_awaiting_approval(self) -> list[SessionRow]:
        async with self._reading("sessions_awaiting_approval") as conn:
            rows = await fetch_all(
                conn,
                "SELECT * FROM sessions WHERE state = 'awaiting_approval' ORDER BY updated_at",
            )
        return [session_row(row) for row in rows]


def _past(row: ToolCallRow, clock: datetime) -> bool:
    return row.expires_at is not None and row.expires_at <= clock
