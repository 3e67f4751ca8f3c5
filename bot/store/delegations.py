"""Delegation while away: `/opsgate delegate @user until …` lets one person decide wherever
another may, until a time (one delegate per delegator; a delegation never chains).

A row per delegator. Starting one replaces the delegator's earlier one; ending it (`off`, or
its time passing) deletes the row, and only the process whose delete took the row audits
`delegation_ended`, so it is audited once across replicas.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .core import StoreCore
from .db import Tx

__all__ = ["Delegation", "Delegations"]


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
