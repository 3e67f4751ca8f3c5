"""Reading the ledger back for `opsgate policy replay`: every recorded call of a window with
where and by whom it was asked, and the allowances of that window. Reads
only: a replay never writes a row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .core import StoreCore
from .db import aware
from .models import AllowanceRow

__all__ = ["RecordedCall", "RecordedCalls"]


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
