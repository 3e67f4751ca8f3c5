"""The append-only audit log, and the memory of Slack event ids that dedupes retries."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .._rules import PROBE_EVENT_ID, SEEN_EVENT_TTL
from .._time import to_db
from ..models import AuditRow
from ._connection import SQLiteConnection, audit_row, fetch_all

__all__ = ["AuditPart"]


class AuditPart(SQLiteConnection):
    async def audit(
        self,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one audit row (the log is append-only: a trigger refuses updates and deletes)."""
        async with self._transaction("audit") as conn:
            await self._write_audit(
                conn, event, actor=actor, session_id=session_id, call_id=call_id, details=details
            )

    async def audit_rows(self, *, since: datetime | None = None) -> list[AuditRow]:
        """Audit rows in the order they were written, from `since` on if given."""
        async with self._reading("audit_rows") as conn:
            if since is None:
                rows = await fetch_all(conn, "SELECT * FROM audit ORDER BY id")
            else:
                rows = await fetch_all(
                    conn, "SELECT * FROM audit WHERE at >= ? ORDER BY id", (to_db(since),)
                )
        return [audit_row(row) for row in rows]

    # -- Slack retries --------------------------------------------------------------------------

    async def first_sighting(self, event_id: str) -> bool:
        """True the first time an event id is seen (Slack retries deliveries); forgets in a day."""
        now = self._clock()
        async with self._transaction("first_sighting") as conn:
            await conn.execute(
                "DELETE FROM seen_events WHERE seen_at < ?", (to_db(now - SEEN_EVENT_TTL),)
            )
            cursor = await conn.execute(
                "INSERT OR IGNORE INTO seen_events (event_id, seen_at) VALUES (?, ?)",
                (event_id, to_db(now)),
            )
            return cursor.rowcount == 1

    async def probe_write(self) -> None:
        """Write one row (readiness: the database accepts writes); raises if it cannot."""
        async with self._transaction("probe_write") as conn:
            await conn.execute(
                "INSERT OR REPLACE INTO seen_events (event_id, seen_at) VALUES (?, ?)",
                (PROBE_EVENT_ID, to_db(self._clock())),
            )
