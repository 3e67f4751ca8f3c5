"""Edit before approving, and time-boxed allowances, on SQLite.

An edit is a decision like any other: a conditional update of a `pending` row in a `BEGIN
IMMEDIATE` transaction, so an edit racing an approval (or another edit) from any process has
one winner. Allowances are rows of their own; using one claims nothing (two runs may use it at
once), revoking one is conditional.
"""

from __future__ import annotations

import json
from datetime import datetime

import aiosqlite

from .._allow_steps import AllowSteps
from .._rules import edit_refusal, edit_summary, new_id
from .._time import aware, to_db
from ..models import AllowanceGrant, AllowanceRow, DecisionOutcome
from ..reasons import MoreApprovalsNeeded
from ._connection import fetch_all, fetch_one
from ._ledger import LedgerPart

__all__ = ["EditsPart"]


class EditsPart(LedgerPart, AllowSteps):
    async def edit_call(
        self,
        ledger_id: str,
        arguments: str,
        digest: str,
        *,
        user_id: str,
        team_id: str | None = None,
        required_approvals: int = 1,
        rule: str | None = None,
    ) -> DecisionOutcome:
        if required_approvals < 1:
            raise ValueError(f"required_approvals must be at least 1, not {required_approvals!r}")
        async with self._transaction("edit_call") as conn:
            row = await self._call_row(conn, ledger_id)
            clock = aware(self._clock())
            now = to_db(clock)
            if row.status == "pending" and row.expires_at is not None and row.expires_at <= clock:
                row = await self._expire(conn, row, now)
            why = edit_refusal(row)
            if why is not None:
                await self._write_audit(
                    conn,
                    "refusal",
                    actor=user_id,
                    session_id=row.session_id,
                    call_id=row.call_id,
                    details={
                        "ledger_id": ledger_id,
                        "decision": "edited",
                        "rule": rule,
                        "why": why.kind,
                    },
                )
                return DecisionOutcome(recorded=False, row=row, why=why)
            final = required_approvals <= 1
            approvals = json.dumps([user_id])
            await conn.execute(
                "UPDATE tool_calls SET edited_arguments = ?, edited_digest = ?, edited_by = ?, "
                "approvals = ? WHERE id = ? AND status = 'pending'",
                (arguments, digest, user_id, approvals, ledger_id),
            )
            if final:
                await conn.execute(
                    "UPDATE tool_calls SET status = 'approved', decided_by = ?, decided_team = ?, "
                    "decided_at = ? WHERE id = ? AND status = 'pending'",
                    (user_id, team_id, now, ledger_id),
                )
            summary = edit_summary(row, arguments, digest, required_approvals, final)
            await self._write_audit(
                conn,
                "edited",
                actor=user_id,
                session_id=row.session_id,
                call_id=row.call_id,
                details={**summary, "rule": rule, "team_id": team_id},
            )
            after = await self._call_row(conn, ledger_id)
        why = None if final else MoreApprovalsNeeded(1, required_approvals)
        return DecisionOutcome(recorded=True, row=after, why=why)

    # -- allowances ------------------------------------------------------------------------------

    async def _insert_allowance(
        self, conn: aiosqlite.Connection, grant: AllowanceGrant, granted_by: str, ledger_id: str
    ) -> AllowanceRow:
        allowance_id = new_id()[:12]
        await conn.execute(
            "INSERT INTO allowances (id, channel_id, tool, shape, label, granted_by, "
            "ledger_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                allowance_id,
                grant.channel_id,
                grant.tool,
                grant.shape,
                grant.label,
                granted_by,
                ledger_id,
                self._now(),
                to_db(grant.expires_at),
            ),
        )
        await self._write_audit(
            conn,
            "allowance",
            actor=granted_by,
            details={
                "allowance_id": allowance_id,
                "channel": grant.channel_id,
                "tool": grant.tool,
                "shape": json.loads(grant.shape),
                "label": grant.label,
                "ledger_id": ledger_id,
                "expires_at": to_db(grant.expires_at),
            },
        )
        found = await fetch_one(conn, "SELECT * FROM allowances WHERE id = ?", (allowance_id,))
        assert found is not None
        return AllowanceRow.model_validate(dict(found))

    async def get_allowance(self, allowance_id: str) -> AllowanceRow | None:
        async with self._reading("get_allowance") as conn:
            row = await fetch_one(conn, "SELECT * FROM allowances WHERE id = ?", (allowance_id,))
        return None if row is None else AllowanceRow.model_validate(dict(row))

    async def active_allowances(
        self, *, channel_id: str | None = None, now: datetime | None = None
    ) -> list[AllowanceRow]:
        moment = to_db(now if now is not None else self._clock())
        sql = "SELECT * FROM allowances WHERE revoked_at IS NULL AND expires_at > ?"
        params: list[str] = [moment]
        if channel_id is not None:
            sql += " AND channel_id = ?"
            params.append(channel_id)
        async with self._reading("active_allowances") as conn:
            rows = await fetch_all(conn, sql + " ORDER BY created_at, id", params)
        return [AllowanceRow.model_validate(dict(r)) for r in rows]

    async def revoke_allowance(self, allowance_id: str, *, user_id: str) -> bool:
        async with self._transaction("revoke_allowance") as conn:
            cursor = await conn.execute(
                "UPDATE allowances SET revoked_at = ?, revoked_by = ? "
                "WHERE id = ? AND revoked_at IS NULL",
                (self._now(), user_id, allowance_id),
            )
            if cursor.rowcount == 0:
                return False
            await self._write_audit(
                conn, "allowance_revoked", actor=user_id, details={"allowance_id": allowance_id}
            )
            return True
