"""Decisions on gated calls (first writer wins), expiry, reminders and cancelling a pause."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from agent_core.approvals import ToolApprovalResponse
from agent_core.batches import close_batch

from .._rules import (
    already,
    arguments_changed,
    cancel_outcome,
    cancel_refusal,
    expiry_ttl,
    responses,
)
from .._time import aware
from ..models import CancelOutcome, DecisionOutcome, PendingApproval, SessionRow, ToolCallRow
from ..reasons import AlreadyApprovedByYou, DecisionReason, MoreApprovalsNeeded, NeedsNoApproval
from ._base import Connection
from ._ledger import Ledger
from ._rows import call_row, count, session_row

__all__ = ["Decisions"]


def _check_decision(decision: str, required_approvals: int) -> None:
    if decision not in ("approved", "rejected"):
        raise ValueError(f"decision must be 'approved' or 'rejected', not {decision!r}")
    if required_approvals < 1:
        raise ValueError(f"required_approvals must be at least 1, not {required_approvals!r}")


class Decisions(Ledger):
    async def _refusal(
        self, conn: Connection, row: ToolCallRow, decision: str, user_id: str, now: datetime
    ) -> DecisionReason | None:
        """Why this decision cannot be recorded (expiring the call if its time is up), or None."""
        if not row.needs_approval:
            return NeedsNoApproval()
        if row.status == "pending" and row.expires_at is not None and row.expires_at <= now:
            return already(await self._expire(conn, row, now))
        if row.status != "pending":
            return already(row)
        if decision == "approved" and user_id in row.approvals:
            return AlreadyApprovedByYou()
        return None

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
        """Record a decision if the call is still pending: first writer wins, across replicas
        (the session and then the call row are locked, as every writer of them does)."""
        _check_decision(decision, required_approvals)
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
        conn: Connection,
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
        unlocked = await self._call(conn, ledger_id)
        await self._session_record(conn, unlocked.session_id, lock=True)
        row = await self._call(conn, ledger_id, lock=True)
        now = self._now()
        why = await self._refusal(conn, row, decision, user_id, now)
        why = why or arguments_changed(row, digest)
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
            return DecisionOutcome(recorded=False, row=await self._call(conn, ledger_id), why=why)
        approvals = list(row.approvals)
        final = True
        if decision == "approved":
            approvals.append(user_id)
            final = len(approvals) >= required_approvals
        if final:
            await conn.execute(
                "UPDATE tool_calls SET status = $1, decided_by = $2, decided_team = $3, "
                "decided_at = $4, reason = $5, approvals = $6 "
                "WHERE id = $7 AND status = 'pending'",
                decision,
                user_id,
                team_id,
                now,
                reason,
                approvals,
                ledger_id,
            )
        else:
            await conn.execute(
                "UPDATE tool_calls SET approvals = $1 WHERE id = $2 AND status = 'pending'",
                approvals,
                ledger_id,
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
        return DecisionOutcome(recorded=True, row=await self._call(conn, ledger_id), why=why)

    async def _expire(self, conn: Connection, row: ToolCallRow, now: datetime) -> ToolCallRow:
        ttl = expiry_ttl(row)
        await conn.execute(
            "UPDATE tool_calls SET status = 'expired', decided_at = $1, ttl = $2 "
            "WHERE id = $3 AND status = 'pending'",
            now,
            ttl,
            row.id,
        )
        await self._write_audit(
            conn,
            "expiry",
            actor=None,
            session_id=row.session_id,
            call_id=row.call_id,
            details={"ledger_id": row.id, "tool": row.name, "ttl": ttl},
        )
        return await self._call(conn, row.id)

    async def expire_due(self, now: datetime | None = None) -> list[ToolCallRow]:
        """Expire every undecided gated call whose time is up; returns them (now `expired`).
        Rows another replica is deciding or expiring right now are skipped (it handles them)."""
        moment = aware(now) if now is not None else self._now()
        async with self._transaction("expire_due") as conn:
            rows = await conn.fetch(
                "SELECT * FROM tool_calls WHERE status = 'pending' AND needs_approval "
                "AND expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at "
                "FOR UPDATE SKIP LOCKED",
                moment,
            )
            return [await self._expire(conn, call_row(row), moment) for row in rows]

    async def due_reminders(
        self, before: timedelta, now: datetime | None = None
    ) -> list[ToolCallRow]:
        """Undecided gated calls that expire within `before` and were not reminded of yet;
        marks them reminded (audited), so each reminder goes out once, from one replica."""
        moment = aware(now) if now is not None else self._now()
        reminded: list[ToolCallRow] = []
        async with self._transaction("due_reminders") as conn:
            rows = await conn.fetch(
                "SELECT * FROM tool_calls WHERE status = 'pending' AND needs_approval "
                "AND reminded_at IS NULL AND expires_at IS NOT NULL "
                "AND expires_at > $1 AND expires_at <= $2 ORDER BY expires_at "
                "FOR UPDATE SKIP LOCKED",
                moment,
                moment + before,
            )
            for row in rows:
                call = call_row(row)
                await conn.execute(
                    "UPDATE tool_calls SET reminded_at = $1 WHERE id = $2", moment, call.id
                )
                await self._write_audit(
                    conn,
                    "reminder",
                    actor=None,
                    session_id=call.session_id,
                    call_id=call.call_id,
                    details={"ledger_id": call.id, "tool": call.name},
                )
                reminded.append(await self._call(conn, call.id))
        return reminded

    async def next_expiry(self) -> datetime | None:
        """When the next undecided gated call expires, so a sweeper knows how long to sleep."""
        async with self._reading("next_expiry") as conn:
            value: datetime | None = await conn.fetchval(
                "SELECT MIN(expires_at) FROM tool_calls WHERE status = 'pending' "
                "AND needs_approval AND expires_at IS NOT NULL"
            )
        return value

    async def responses_for_batch(self, session_id: str) -> list[ToolApprovalResponse]:
        return responses(await self.batch_calls(session_id), self._person)

    async def pending_approvals(self) -> list[PendingApproval]:
        """Every gated call still waiting for decisions in a paused run, oldest first."""
        async with self._reading("pending_approvals") as conn:
            rows = await conn.fetch(
                "SELECT to_jsonb(t) AS call, to_jsonb(s) AS session FROM tool_calls AS t "
                "JOIN sessions AS s ON s.id = t.session_id AND s.batch_id = t.batch_id "
                "WHERE t.status = 'pending' AND t.needs_approval "
                "AND s.state = 'awaiting_approval' ORDER BY t.created_at, t.position"
            )
        return [
            PendingApproval(
                call=ToolCallRow.model_validate(row["call"]),
                session=SessionRow.model_validate(row["session"]),
            )
            for row in rows
        ]

    async def sessions_awaiting_approval(self) -> list[SessionRow]:
        """Sessions paused for decisions (a replica resumes those already decided)."""
        async with self._reading("sessions_awaiting_approval") as conn:
            rows = await conn.fetch(
                "SELECT * FROM sessions WHERE state = 'awaiting_approval' ORDER BY updated_at"
            )
        return [session_row(row) for row in rows]

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
        """End a run that waits for approval, without running anything of its batch.

        Same contract as the SQLite store: a conditional update of the session from
        `awaiting_approval` to `idle` decides a race with a resume claim or another cancel;
        every call of the batch gets its one tool message; audited.
        """
        async with self._transaction("cancel_batch") as conn:
            session = await self._session_record(conn, session_id, lock=True)
            current = session["batch_id"]
            why = cancel_refusal(batch_id, current, session["state"], moved=False)
            if why is None:
                status = await conn.execute(
                    "UPDATE sessions SET state = 'idle', error = NULL, instance_id = NULL, "
                    "updated_at = $1 WHERE id = $2 AND state = 'awaiting_approval' "
                    "AND batch_id IS NOT DISTINCT FROM $3",
                    self._now(),
                    session_id,
                    current,
                )
                why = cancel_refusal(None, None, session["state"], moved=count(status) == 0)
            before = [
                call_row(row)
                for row in await conn.fetch(
                    "SELECT * FROM tool_calls WHERE batch_id = $1 ORDER BY position FOR UPDATE",
                    batch_id if batch_id is not None else current,
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
            await self._cancel_calls(conn, session, before, user_id, team_id, via, rule)
            after = [await self._call(conn, row.id) for row in before]
            return CancelOutcome(cancelled=True, rows=after)

    async def _cancel_calls(
        self,
        conn: Connection,
        session: Any,
        before: list[ToolCallRow],
        user_id: str,
        team_id: str | None,
        via: str,
        rule: str | None,
    ) -> None:
        who = self._person(user_id)
        now = self._now()
        for row in before:
            if row.status not in ("pending", "approved"):
                continue
            await conn.execute(
                "UPDATE tool_calls SET status = 'cancelled', decided_by = $1, decided_team = $2, "
                "decided_at = $3, reason = $4 WHERE id = $5 AND status = $6",
                user_id,
                team_id,
                now,
                f"cancelled by {who}",
                row.id,
                row.status,
            )
            await self._write_audit(
                conn,
                "cancel",
                actor=user_id,
                session_id=session["id"],
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
        tail = await self._latest_batch_messages(conn, session["id"], session["last_calls_seq"])
        outcome = cancel_outcome({row.call_id: row for row in before}, who, self._person)
        answers = close_batch(tail, outcome)
        if answers:
            await self._append(conn, session["id"], answers)
