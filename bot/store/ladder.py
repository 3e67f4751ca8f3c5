"""When nobody answers: the escalation steps and the reminders of a waiting call, each
claimed once across every process sharing the database.

A call's row keeps how many steps of its ladder have passed (`escalation_step`) and how many
reminders went out (`reminders_sent`). Passing a step or sending a reminder is a compare-and-set
on that number, with its audit row and the direct messages it owes (outbox rows), so two
replicas whose timers fire together act once, and a restart neither repeats nor skips a step.
A tick claims many calls' steps and reminders in one transaction (`claim_all`), set-based: a
few hundred calls' claims are a locked read, one update, one audit insert and two outbox
statements, and one commit (one fsync), so a store of 10,000 waiting calls all due at once is
driven within one timer tick.

The other answer to an absent approver is delegation (`Delegations`): `/opsgate delegate @user
until ...` lets one person decide wherever another may, until a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ._outbox_rows import OutboxEntry, card_redraw, put_many
from .audit import AuditBatch, AuditDraft
from .core import StoreCore
from .db import Tx
from .models import Quorum, SessionRow, ToolCallRow
from .rules import tally

__all__ = ["Claimed", "Delegation", "Delegations", "Escalations", "LadderClaim"]

_EVENTS = {"escalation_step": "escalated", "reminders_sent": "reminded"}
_READ = 500
"""Calls whose rows one locked read takes (parameters in one `IN` list)."""


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


@dataclass(slots=True)
class _Held:
    """A call a batch claims for, as its locked row says and its claims so far leave it."""

    counts: dict[str, int]
    """`escalation_step` and `reminders_sent`."""
    approvals: bool
    """Whether any approval was given (only then can a lowered quorum be met)."""
    pending: bool = True
    moved: bool = False

    def take(self, claim: LadderClaim) -> bool:
        """Make `claim` if it holds against the call as the batch has left it: a step claimed
        after the one before it in the same batch holds, one another process passed first,
        or on a call decided meanwhile, does not."""
        if not self.pending or self.counts[claim.column] != claim.seen:
            return False
        self.counts[claim.column] = claim.value
        self.moved = True
        return True


class Escalations(AuditBatch):
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

    async def sessions_of(self, ids: Sequence[str]) -> dict[str, SessionRow]:
        """The sessions of `ids` by id (one gone is left out): a tick's waiting calls' threads
        read together, not one read per call."""
        unique = sorted(set(ids))
        found: dict[str, SessionRow] = {}
        async with self._db.reading("sessions_of") as tx:
            for first in range(0, len(unique), _READ):
                names = _named(unique[first : first + _READ])
                rows = await tx.fetch_all(
                    f"SELECT * FROM sessions WHERE id IN ({_marks(names)})", names
                )
                found.update((str(r["id"]), self._session_model(r)) for r in rows)
        return found

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
        does not compete with claiming for the connection); with `wake` it is woken anyway.

        Set-based, so hundreds of calls cost a handful of statements, not a dozen each: the
        calls' rows are read once, locked (`_held`), the claims checked against them in order,
        the new counts written in one statement, then the claims' audit rows appended
        together (`_write_audits`) and their outbox rows put together (`put_many`)."""
        done: list[Claimed] = []
        if claims:
            async with self._db.transaction(f"claim {len(claims)} ladder steps") as tx:
                done = await self._claim_in(tx, claims)
        if wake:
            self._redraws_owed()  # wakes the outbox's sender
        return done

    async def _claim_in(self, tx: Tx, claims: Sequence[LadderClaim]) -> list[Claimed]:
        held = await self._held(tx, sorted({claim.row.id for claim in claims}))
        done: list[Claimed] = []
        drafts: list[AuditDraft] = []
        owed: list[OutboxEntry] = []
        for claim in claims:
            call = held.get(claim.row.id)
            if call is None or not call.take(claim):
                done.append(Claimed(made=False))
                continue
            drafts.append(_audited(claim))
            owed += self._owed_by(claim)
            approved = None
            if claim.needs and call.approvals:  # rare: a lowered quorum may be met already
                await self._write_audits(tx, drafts)  # the step's row before the decision's
                drafts = []
                await self._write_counts(tx, {claim.row.id: call})
                approved = await self._approve_if_met(tx, claim)
                call.pending = approved is None
            done.append(Claimed(made=True, approved=approved))
        await self._write_audits(tx, drafts)
        await self._write_counts(tx, {i: call for i, call in held.items() if call.moved})
        await put_many(self._db, tx, owed, self._now())
        return done

    def _owed_by(self, claim: LadderClaim) -> list[OutboxEntry]:
        """The outbox rows a claim made owes: its direct messages and, for a step, its card's
        redraw ("escalated to ...")."""
        row = claim.row
        stepped = claim.column == "escalation_step" and row.needs_approval and row.card_ts
        redraw = [card_redraw(row.id, row.card_channel)] if stepped else []
        return [*redraw, *claim.owed]

    async def _held(self, tx: Tx, ids: Sequence[str]) -> dict[str, _Held]:
        """Those of `ids` still pending, locked for writing (PostgreSQL: in id order, so two
        replicas claiming overlapping batches never wait on each other in a cycle)."""
        held: dict[str, _Held] = {}
        for first in range(0, len(ids), _READ):
            names = _named(ids[first : first + _READ])
            rows = await tx.fetch_all(
                "SELECT id, escalation_step, reminders_sent, approvals FROM tool_calls "
                f"WHERE id IN ({_marks(names)}) AND status = 'pending' "
                f"ORDER BY id{self._db.for_update}",
                names,
            )
            for row in rows:
                counts = {c: int(row[c]) for c in ("escalation_step", "reminders_sent")}
                held[str(row["id"])] = _Held(counts, bool(self._db.list_out(row["approvals"])))
        return held

    async def _write_counts(self, tx: Tx, calls: Mapping[str, _Held]) -> None:
        """The calls' ladder counts as the batch left them, in one statement."""
        await tx.execute_many(
            "UPDATE tool_calls SET escalation_step = :escalation_step, "
            "reminders_sent = :reminders_sent WHERE id = :id",
            [{"id": ledger_id, **calls[ledger_id].counts} for ledger_id in sorted(calls)],
        )

    async def _approve_if_met(self, tx: Tx, claim: LadderClaim) -> ToolCallRow | None:
        """A step that lowered the quorum to the approvals already given approves the call
        now, counted as a click would count them (`rules.tally`), not at the next click."""
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


def _audited(claim: LadderClaim) -> AuditDraft:
    row = claim.row
    details = {"ledger_id": row.id, "tool": row.name, **claim.details}
    return AuditDraft(claim.event, None, row.session_id, row.call_id, details)


def _named(values: Sequence[str]) -> dict[str, str]:
    """`values` as the parameters of an `IN` list (`_marks`)."""
    return {f"v{n}": value for n, value in enumerate(values)}


def _marks(names: Mapping[str, str]) -> str:
    return ", ".join(f":{name}" for name in names)


# -- delegation while away ---------------------------------------------------------------------
# One delegate per delegator, and a delegation never chains. A row per delegator: starting one
# replaces the delegator's earlier one; ending it (`off`, or its time passing) deletes the row,
# and only the process whose delete took the row audits `delegation_ended`, so it is audited
# once across replicas.


@dataclass(frozen=True, slots=True)
class Delegation:
    delegator: str
    delegate: str
    until: datetime
    reason: str | None


class Delegations(StoreCore):
    """The delegation operations of `bot.store.Store`."""

    async def delegate(
        self, delegator: str, delegate: str, until: datetime, reason: str | None
    ) -> None:
        """`delegate` decides for `delegator` until `until`, replacing an earlier delegation
        of `delegator` (audited "delegated")."""
        async with self._db.transaction("delegate") as tx:
            await tx.execute("DELETE FROM delegations WHERE delegator = :d", {"d": delegator})
            await tx.execute(
                "INSERT INTO delegations (delegator, delegate, until, reason, created_at)"
                " VALUES (:delegator, :delegate, :until, :reason, :now)",
                {
                    "delegator": delegator,
                    "delegate": delegate,
                    "until": self._db.time_in(until),
                    "reason": reason,
                    "now": self._now(),
                },
            )
            details = {"delegate": delegate, "until": until.isoformat(), "reason": reason}
            await self._write_audit(
                tx, "delegated", actor=delegator, session_id=None, call_id=None, details=details
            )

    async def end_delegation(self, delegator: str, why: str = "ended") -> bool:
        """End `delegator`'s delegation now (audited "delegation_ended"); False: none."""
        async with self._db.transaction("end delegation") as tx:
            return await self._end(tx, delegator, why, None)

    async def end_lapsed_delegations(self, now: datetime) -> int:
        """End every delegation whose time has passed (each audited once across stores)."""
        async with self._db.transaction("lapsed delegations") as tx:
            rows = await tx.fetch_all(
                "SELECT delegator FROM delegations WHERE until <= :now",
                {"now": self._db.time_in(now)},
            )
            ended = [await self._end(tx, str(r["delegator"]), "expired", now) for r in rows]
        return sum(ended)

    async def delegations(self, now: datetime) -> list[Delegation]:
        """The delegations in force at `now`."""
        async with self._db.reading("delegations") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM delegations WHERE until > :now ORDER BY delegator",
                {"now": self._db.time_in(now)},
            )
        out: list[Delegation] = []
        for row in rows:
            until = self._db.time_out(row["until"])
            assert until is not None
            out.append(Delegation(row["delegator"], row["delegate"], until, row["reason"]))
        return out

    async def _end(self, tx: Tx, delegator: str, why: str, lapsed: datetime | None) -> bool:
        row = await tx.fetch_one(
            "SELECT delegate FROM delegations WHERE delegator = :d", {"d": delegator}
        )
        where = "DELETE FROM delegations WHERE delegator = :d"
        params: dict[str, object] = {"d": delegator}
        if lapsed is not None:
            where += " AND until <= :now"
            params["now"] = self._db.time_in(lapsed)
        if row is None or not await tx.execute(where, params):
            return False
        details = {"delegate": row["delegate"], "why": why}
        await self._write_audit(
            tx,
            "delegation_ended",
            actor=None if lapsed else delegator,
            session_id=None,
            call_id=None,
            details=details,
        )
        return True
