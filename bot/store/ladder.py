"""When nobody answers: the escalation steps and the reminders of a waiting call, each
claimed once across every process sharing the database.

A call's row keeps how many steps of its ladder have passed (`escalation_step`) and how many
reminders went out (`reminders_sent`). Passing a step or sending a reminder is a compare-and-set
on that number, with its audit row and the direct messages it owes (outbox rows), so two
replicas whose timers fire together act once, and a restart neither repeats nor skips a step.
A tick claims many calls' steps and reminders in one transaction (`claim_all`): one commit
(one fsync) per hundred calls, not one per step, so a store of 10,000 waiting calls all due
at once is driven within one timer tick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ._outbox_rows import OutboxEntry, put_rows
from .core import StoreCore
from .db import Tx
from .models import ToolCallRow
from .quorum import Quorum, tally

__all__ = ["Claimed", "Escalations", "LadderClaim"]

_EVENTS = {"escalation_step": "escalated", "reminders_sent": "reminded"}


@dataclass(frozen=True, slots=True)
class LadderClaim:
    """Move `row`'s `column` from `seen` to `value` (a step passed, a reminder round sent),
    audited with `details` and owing `owed`; only if no one did it first."""

    row: ToolCallRow
    column: Literal["escalation_step", "reminders_sent"]
    seen: int
    value: int
    details: Mapping[str, Any]
    owed: Sequence[OutboxEntry] = ()
    needs: tuple[Quorum, ...] = ()
    """A step's requirements once it has passed (a lowered quorum): when the approvals
    already given meet them, the call is approved in the claim's own transaction."""

    @property
    def event(self) -> str:
        return _EVENTS[self.column]


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a claim did: whether it was made, and the call it approved (a lowered quorum
    met by the approvals already given), if it did."""

    made: bool
    approved: ToolCallRow | None = None


class Escalations(StoreCore):
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
        claim = LadderClaim(row, "escalation_step", row.escalation_step, step, details, owed)
        [done] = await self.claim_all([claim])
        return done.made

    async def claim_reminder(
        self,
        row: ToolCallRow,
        count: int,
        details: Mapping[str, Any],
        owed: Sequence[OutboxEntry] = (),
    ) -> bool:
        claim = LadderClaim(row, "reminders_sent", row.reminders_sent, count, details, owed)
        [done] = await self.claim_all([claim])
        return done.made

    async def claim_all(self, claims: Sequence[LadderClaim], *, wake: bool = True) -> list[Claimed]:
        """Each claim in order, all in one transaction; which of them were made (a claim
        another process made first, or on a call decided since, is not). `wake=False` leaves
        the outbox's sender asleep (a tick wakes it once, after its last claims, so sending
        does not compete with claiming for the connection); with `wake` it is woken anyway."""
        done: list[Claimed] = []
        if claims:
            async with self._db.transaction(f"claim {len(claims)} ladder steps") as tx:
                done = [await self._claim_in(tx, claim) for claim in claims]
        if wake:
            self._redraws_owed()  # wakes the outbox's sender
        return done

    async def _claim_in(self, tx: Tx, claim: LadderClaim) -> Claimed:
        row, column = claim.row, claim.column
        changed = await tx.execute(
            f"UPDATE tool_calls SET {column} = :value WHERE id = :id "
            f"AND status = 'pending' AND {column} = :seen",
            {"value": claim.value, "id": row.id, "seen": claim.seen},
        )
        if not changed:
            return Claimed(made=False)
        audited = {"ledger_id": row.id, "tool": row.name, **claim.details}
        await self._audit_call(tx, claim.event, row, audited, actor=None)
        if column == "escalation_step":
            await self._owe_redraw(tx, row)
        if claim.owed:
            await put_rows(self._db, tx, claim.owed, self._now())
        approved = await self._approve_if_met(tx, claim) if claim.needs else None
        return Claimed(made=True, approved=approved)

    async def _approve_if_met(self, tx: Tx, claim: LadderClaim) -> ToolCallRow | None:
        """A step that lowered the quorum to the approvals already given approves the call
        now, counted as a click would count them (`bot.store.quorum`), not at the next click."""
        row = await self._call(tx, claim.row.id)
        if row.status != "pending" or not row.approvals:
            return None
        count = tally(row.quorum_state(), row.approvals, None, claim.needs, None)
        if count.missing:
            return None
        approved = await tx.execute(
            "UPDATE tool_calls SET status = 'approved', decided_by = :user, decided_at = :now, "
            "quorum = :quorum WHERE id = :id AND status = 'pending'",
            {
                "user": row.approvals[-1],
                "now": self._now(),
                "quorum": count.state.model_dump_json(),
                "id": row.id,
            },
        )
        if not approved:
            return None
        details = {
            "ledger_id": row.id,
            "tool": row.name,
            "digest": row.digest,
            "decision": "approved",
            "approvals": len(row.approvals),
            "final": True,
            "required_approvals": claim.needs[0].needed,
            "step": claim.value,
            "approved_by": list(row.approvals),
        }
        await self._audit_call(tx, "decision", row, details, actor=None)
        return await self._call(tx, row.id)
