"""Edit before approving, and time-boxed allowances, on PostgreSQL.

An edit locks the session and then the call row, as every decision does, so an edit racing an
approval (or another edit) on any replica has one winner. Using an allowance claims nothing (two
replicas may use one at once); revoking one is conditional.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from .._allow_steps import AllowSteps
from .._rules import edit_refusal, edit_summary, new_id
from .._time import aware
from ..models import AllowanceGrant, AllowanceRow, DecisionOutcome
from ..reasons import MoreApprovalsNeeded
from ._base import Connection
from ._recovery import Recovery
from ._rows import count

__all__ = ["Edits"]


class Edits(Recovery, AllowSteps):
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
            unlocked = await self._call(conn, ledger_id)
            await self._session_record(conn, unlocked.session_id, lock=True)
            row = await self._call(conn, ledger_id, lock=True)
            now = self._now()
            if row.status == "pending" and row.expires_at is not None and row.expires_at <= now:
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
            await conn.execute(
                "UPDATE tool_calls SET edited_arguments = $1, edited_digest = $2, edited_by = $3, "
                "approvals = $4 WHERE id = $5 AND status = 'pending'",
                arguments,
                digest,
                user_id,
                [user_id],
                ledger_id,
            )
            if final:
                await conn.execute(
                    "UPDATE tool_calls SET status = 'approved', decided_by = $1, "
                    "decided_team = $2, decided_at = $3 WHERE id = $4 AND status = 'pending'",
                    user_id,
                    team_id,
                    now,
                    ledger_id,
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
            after = await self._call(conn, ledger_id)
        why = None if final else MoreApprovalsNeeded(1, required_approvals)
        return DecisionOutcome(recorded=True, row=after, why=why)

    # -- allowances ------------------------------------------------------------------------------

    async def _insert_allowance(
        self, conn: Connection, grant: AllowanceGrant, granted_by: str, ledger_id: str
    ) -> AllowanceRow:
        allowance_id = new_id()[:12]
        until = aware(grant.expires_at)
        record = await conn.fetchrow(
            "INSERT INTO allowances (id, channel_id, tool, shape, label, granted_by, "
            "ledger_id, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
            "RETURNING *",
            allowance_id,
            grant.channel_id,
            grant.tool,
            grant.shape,
            grant.label,
            granted_by,
            ledger_id,
            self._now(),
            until,
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
                "expires_at": until.isoformat(),
            },
        )
        return _allowance(record)

    async def get_allowance(self, allowance_id: str) -> AllowanceRow | None:
        async with self._reading("get_allowance") as conn:
            record = await conn.fetchrow("SELECT * FROM allowances WHERE id = $1", allowance_id)
        return None if record is None else _allowance(record)

    async def active_allowances(
        self, *, channel_id: str | None = None, now: datetime | None = None
    ) -> list[AllowanceRow]:
        moment = aware(now) if now is not None else self._now()
        async with self._reading("active_allowances") as conn:
            records = await conn.fetch(
                "SELECT * FROM allowances WHERE revoked_at IS NULL AND expires_at > $1 "
                "AND ($2::text IS NULL OR channel_id = $2) ORDER BY created_at, id",
                moment,
                channel_id,
            )
        return [_allowance(r) for r in records]

    async def revoke_allowance(self, allowance_id: str, *, user_id: str) -> bool:
        async with self._transaction("revoke_allowance") as conn:
            status = await conn.execute(
                "UPDATE allowances SET revoked_at = $1, revoked_by = $2 "
                "WHERE id = $3 AND revoked_at IS NULL",
                self._now(),
                user_id,
                allowance_id,
            )
            if count(status) == 0:
                return False
            await self._write_audit(
                conn, "allowance_revoked", actor=user_id, details={"allowance_id": allowance_id}
            )
            return True


def _allowance(record: Any) -> AllowanceRow:
    return AllowanceRow.model_validate(dict(record))
