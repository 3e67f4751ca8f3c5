"""Change freezes and break-glass in the store: ad hoc freezes, the once-only claims of freeze
announcements, and break-glass uses waiting for their review.

An ad hoc freeze (`/opsgate freeze`) must hold on every replica, so it is a row, not process
state. Each start and end of a freeze window is announced and audited by whichever replica
claims its key first (`claim_freeze_notice`: the claim and the audit row in one transaction);
an end is claimed only after its start was, so a window nobody saw begin is not announced as
ended. A break-glass use is recorded with its reason, in the transaction of the approval it
gives and of its card's redraw (`break_glass`), and stays unreviewed until an approver other than
the breaker marks it reviewed (conditional: the first reviewer wins; the card's redraw commits
with the review).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from bot.settings import checkpoint

from ._outbox_rows import OutboxEntry, put_rows
from .core import StoreCore
from .db import Row, Tx, aware
from .decisions import decide_in
from .models import ONE_APPROVAL, DecisionOutcome, Ruling
from .rules import new_id

__all__ = ["BreakGlassRow", "FreezeRow", "Freezes", "GlassUse"]

_FROZEN = ConfigDict(frozen=True)


class FreezeRow(BaseModel):
    """An ad hoc freeze of one channel, from `starts_at` until `ends_at` (moved to the moment
    of `/opsgate unfreeze`, by `ended_by`, when it was ended early)."""

    model_config = _FROZEN

    id: str
    channel_id: str
    started_by: str
    reason: str
    starts_at: datetime
    ends_at: datetime
    ended_by: str | None = None


class BreakGlassRow(BaseModel):
    """One use of "Break glass" on a call a freeze blocked, and its review."""

    model_config = _FROZEN

    ledger_id: str
    channel_id: str
    broken_by: str
    reason: str
    freeze_key: str
    """The freeze it broke (`freezes[<i>]` or `adhoc:<id>`)."""
    broken_at: datetime
    reviewed_by: str | None = None
    reviewed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class GlassUse:
    """Who breaks glass on a call, why, in which channel, and which freeze it breaks
    (`details`: more for its `break_glass` audit row)."""

    channel_id: str
    user_id: str
    reason: str
    freeze: str
    details: Mapping[str, Any] = field(default_factory=dict)


class Freezes(StoreCore):
    async def start_freeze(
        self, *, channel_id: str, started_by: str, reason: str, ends_at: datetime
    ) -> FreezeRow:
        """A new ad hoc freeze of `channel_id`, from now until `ends_at` (announced and audited
        as `freeze_started` by the claim of its start, like a scheduled one)."""
        freeze_id = new_id()
        async with self._db.transaction("start_freeze") as tx:
            await tx.execute(
                "INSERT INTO freezes (id, channel_id, started_by, reason, starts_at, ends_at) "
                "VALUES (:id, :channel, :user, :reason, :now, :until)",
                {
                    "id": freeze_id,
                    "channel": channel_id,
                    "user": started_by,
                    "reason": reason,
                    "now": self._now(),
                    "until": self._db.time_in(aware(ends_at)),
                },
            )
            row = await tx.fetch_one("SELECT * FROM freezes WHERE id = :id", {"id": freeze_id})
        assert row is not None
        return self._freeze(row)

    async def end_freezes(self, *, channel_id: str, ended_by: str) -> list[FreezeRow]:
        """End the channel's ad hoc freezes in force now (conditional: each ends once)."""
        now = self._now()
        async with self._db.transaction("end_freezes") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM freezes WHERE channel_id = :channel AND starts_at <= :now "
                "AND ends_at > :now",
                {"channel": channel_id, "now": now},
            )
            ended = []
            for row in rows:
                touched = await tx.execute(
                    "UPDATE freezes SET ends_at = :now, ended_by = :user "
                    "WHERE id = :id AND ends_at > :now",
                    {"now": now, "user": ended_by, "id": row["id"]},
                )
                if touched:
                    found = await tx.fetch_one(
                        "SELECT * FROM freezes WHERE id = :id", {"id": row["id"]}
                    )
                    assert found is not None
                    ended.append(self._freeze(found))
        return ended

    async def ad_hoc_freezes(
        self, *, ending_after: datetime, channel_id: str | None = None
    ) -> list[FreezeRow]:
        """Ad hoc freezes that end after `ending_after` (in force, or ended since then), of
        one channel when `channel_id` is given."""
        sql = "SELECT * FROM freezes WHERE ends_at > :after"
        if channel_id is not None:
            sql += " AND channel_id = :channel"
        async with self._db.reading("ad_hoc_freezes") as tx:
            rows = await tx.fetch_all(
                sql + " ORDER BY starts_at, id",
                {"after": self._db.time_in(aware(ending_after)), "channel": channel_id},
            )
        return [self._freeze(r) for r in rows]

    async def claim_freeze_notice(
        self,
        key: str,
        event: str,
        *,
        details: Mapping[str, Any],
        after: str | None = None,
    ) -> bool:
        """Claim the announcement `key` (a freeze window's start or end) and audit `event`
        with `details`, in one transaction; True for the one caller that claimed it. `after`:
        claim only if that key was claimed before (an end only after its start)."""
        async with self._db.transaction("claim_freeze_notice") as tx:
            if after is not None:
                seen = await tx.fetch_value(
                    "SELECT count(*) FROM freeze_notices WHERE key = :key", {"key": after}
                )
                if not seen:
                    return False
            touched = await tx.execute(
                "INSERT INTO freeze_notices (key, claimed_at) VALUES (:key, :now) "
                "ON CONFLICT (key) DO NOTHING",
                {"key": key, "now": self._now()},
            )
            if not touched:
                return False
            await self._write_audit(tx, event, actor=None, details=details)
            return True

    async def break_glass(
        self,
        ledger_id: str,
        use: GlassUse,
        *,
        team_id: str | None = None,
        ruling: Ruling = ONE_APPROVAL,
        digest: str | None = None,
        notices: Sequence[OutboxEntry] = (),
    ) -> DecisionOutcome:
        """Approve a frozen call by breaking glass: the approval (as `decide`, its reason
        "break glass: ..."), the break-glass row with its `break_glass` audit, the card's
        redraw (when owed) and the loud notice's outbox rows (`notices`) in ONE transaction,
        so the card is never drawn from a decision without its break-glass use, the notice
        is never lost after it, and a crash leaves all of them or none."""
        async with self._db.transaction("break_glass") as tx:
            outcome = await decide_in(
                self,
                tx,
                ledger_id,
                "approved",
                user_id=use.user_id,
                team_id=team_id,
                reason=f"break glass: {use.reason}",
                ruling=ruling,
                digest=digest,
            )
            if outcome.recorded:
                await checkpoint("glass_decided")  # crash tests: approved, glass not recorded
                row = outcome.row
                await self._record_glass(tx, ledger_id, use, row.session_id, row.call_id)
                await put_rows(self._db, tx, notices, self._now())
        self._redraws_owed()
        return outcome

    async def _record_glass(
        self,
        tx: Tx,
        ledger_id: str,
        use: GlassUse,
        session_id: str | None,
        call_id: str | None,
    ) -> bool:
        touched = await tx.execute(
            "INSERT INTO break_glass (ledger_id, channel_id, broken_by, reason, freeze_key, "
            "broken_at) VALUES (:id, :channel, :user, :reason, :freeze, :now) "
            "ON CONFLICT (ledger_id) DO NOTHING",
            {
                "id": ledger_id,
                "channel": use.channel_id,
                "user": use.user_id,
                "reason": use.reason,
                "freeze": use.freeze,
                "now": self._now(),
            },
        )
        if not touched:
            return False
        details = {**use.details, "ledger_id": ledger_id, "reason": use.reason}
        await self._write_audit(
            tx,
            "break_glass",
            actor=use.user_id,
            session_id=session_id,
            call_id=call_id,
            details={**details, "freeze": use.freeze},
        )
        return True

    async def break_glass_of(self, ledger_id: str) -> BreakGlassRow | None:
        async with self._db.reading("break_glass_of") as tx:
            row = await tx.fetch_one(
                "SELECT * FROM break_glass WHERE ledger_id = :id", {"id": ledger_id}
            )
        return None if row is None else self._glass(row)

    async def review_break_glass(self, ledger_id: str, *, user_id: str) -> BreakGlassRow | None:
        """Mark a break-glass use reviewed (never by its breaker), audit
        `break_glass_reviewed`; conditional (None when reviewed already). The card's redraw
        (when owed) commits with it."""
        async with self._db.transaction("review_break_glass") as tx:
            touched = await tx.execute(
                "UPDATE break_glass SET reviewed_by = :user, reviewed_at = :now "
                "WHERE ledger_id = :id AND reviewed_by IS NULL AND broken_by <> :user",
                {"user": user_id, "now": self._now(), "id": ledger_id},
            )
            if not touched:
                return None
            row = await tx.fetch_one(
                "SELECT * FROM break_glass WHERE ledger_id = :id", {"id": ledger_id}
            )
            assert row is not None
            # The card loses its "Mark reviewed": its redraw commits with the review.
            call = await tx.fetch_one("SELECT * FROM tool_calls WHERE id = :id", {"id": ledger_id})
            if call is not None:
                await self._owe_redraw(tx, self._call_model(call))
            await self._write_audit(
                tx,
                "break_glass_reviewed",
                actor=user_id,
                details={"ledger_id": ledger_id, "broken_by": row["broken_by"]},
            )
        self._redraws_owed()
        return self._glass(row)

    async def unreviewed_break_glass(self) -> list[BreakGlassRow]:
        async with self._db.reading("unreviewed_break_glass") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM break_glass WHERE reviewed_by IS NULL ORDER BY broken_at, ledger_id"
            )
        return [self._glass(r) for r in rows]

    def _freeze(self, row: Row) -> FreezeRow:
        data = dict(row)
        for key in ("starts_at", "ends_at"):
            data[key] = self._db.time_out(data[key])
        return FreezeRow.model_validate(data)

    def _glass(self, row: Row) -> BreakGlassRow:
        data = dict(row)
        for key in ("broken_at", "reviewed_at"):
            data[key] = self._db.time_out(data[key])
        return BreakGlassRow.model_validate(data)
