"""When nobody answers: the escalation steps and the reminders of a waiting call, each
claimed once across every process sharing the database.

A call's row keeps how many steps of its ladder have passed (`escalation_step`) and how many
reminders went out (`reminders_sent`). Passing a step or sending a reminder is a compare-and-set
on that number, in one transaction with its audit row and the direct messages it owes (outbox
rows), so two replicas whose timers fire together act once, and a restart neither repeats nor
skips a step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ._outbox_rows import OutboxEntry, put_rows
from .ledger import Ledger
from .models import ToolCallRow

__all__ = ["Escalations"]


class Escalations(Ledger):
    """The ladder operations of `bot.store.Store`."""

    async def waiting_calls(self, limit: int = 10_000) -> list[ToolCallRow]:
        """Undecided gated calls whose card was posted, oldest first."""
        async with self._db.reading("waiting_calls") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM tool_calls WHERE status = 'pending' AND needs_approval "
                "AND card_ts IS NOT NULL ORDER BY created_at LIMIT :limit",
                {"limit": limit},
            )
        return [self._call_model(row) for row in rows]

    async def calls_since(self, since: datetime) -> list[ToolCallRow]:
        """Every ledger row created at or after `since`, oldest first (`opsgate report`)."""
        async with self._db.reading("calls_since") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM tool_calls WHERE created_at >= :since ORDER BY created_at",
                {"since": self._db.time_in(since)},
            )
        return [self._call_model(row) for row in rows]

    async def claim_escalation(
        self,
        row: ToolCallRow,
        step: int,
        details: Mapping[str, Any],
        owed: Sequence[OutboxEntry] = (),
    ) -> bool:
        return await self._move_on(row, "escalation_step", step, "escalated", details, owed)

    async def claim_reminder(
        self,
        row: ToolCallRow,
        count: int,
        details: Mapping[str, Any],
        owed: Sequence[OutboxEntry] = (),
    ) -> bool:
        return await self._move_on(row, "reminders_sent", count, "reminded", details, owed)

    async def _move_on(
        self,
        row: ToolCallRow,
        column: str,
        value: int,
        event: str,
        details: Mapping[str, Any],
        owed: Sequence[OutboxEntry],
    ) -> bool:
        seen = row.escalation_step if column == "escalation_step" else row.reminders_sent
        async with self._db.transaction(f"claim {event}") as tx:
            changed = await tx.execute(
                f"UPDATE tool_calls SET {column} = :value WHERE id = :id "
                f"AND status = 'pending' AND {column} = :seen",
                {"value": value, "id": row.id, "seen": seen},
            )
            if not changed:
                return False
            audited = {"ledger_id": row.id, "tool": row.name, **details}
            await self._audit_call(tx, event, row, audited, actor=None)
            if event == "escalated":
                await self._owe_redraw(tx, row)
            if owed:
                await put_rows(self._db, tx, owed, self._now())
        if event == "escalated" or owed:
            self._redraws_owed()  # wakes the outbox's sender
        return True
