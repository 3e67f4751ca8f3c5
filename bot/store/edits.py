"""Edit before approving, and time-boxed allowances ("Allow for").

An edit is decided like an approval (the session, then the call locked), so an edit racing an
approval or another edit has one winner. "Allow for" approves the call and creates its
allowance in ONE transaction, so a crash leaves both or neither. Using an allowance claims
nothing (two replicas may use one at once); revoking one is conditional.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from bot.settings import checkpoint

from .core import StoreCore
from .db import Row, Tx, aware, to_text
from .decisions import decide_in
from .models import (
    ONE_APPROVAL,
    AllowanceGrant,
    AllowanceRow,
    AllowOutcome,
    DecisionOutcome,
    MoreApprovalsNeeded,
    Ruling,
)
from .rules import edit_refusal, edit_summary, new_id, tally

__all__ = ["Edits"]


def _allowance(row: Row) -> AllowanceRow:
    return AllowanceRow.model_validate(dict(row))


class Edits(StoreCore):
    """Edit before approving, and the allowances of "Allow for"."""

    async def edit_call(
        self,
        ledger_id: str,
        arguments: str,
        digest: str,
        *,
        user_id: str,
        team_id: str | None = None,
        ruling: Ruling = ONE_APPROVAL,
        approve: bool = True,
        counts_for: Sequence[str] | None = None,
    ) -> DecisionOutcome:
        """Approve a pending call with the arguments `user_id` changed it to (canonical JSON,
        and their `digest`): conditional like `decide` (an edit racing an approval has one
        winner). The edited call is a new one: earlier approvals are dropped and the editor's is
        its first (`approve=False`: none is, when the edited call has a preview nobody has seen
        yet). `arguments` keeps the model's own; `ruling` as for `decide`. Audited "edited"
        (both versions, and the ruling's rules as on every decision row)."""
        async with self._db.transaction("edit_call") as tx:
            outcome = await self._edit_in(
                tx,
                ledger_id,
                (arguments, digest),
                user_id,
                team_id,
                ruling,
                approve=approve,
                counts_for=counts_for,
            )
        self._redraws_owed()  # an expiry found on the way owes its card's redraw too
        return outcome

    async def _edit_in(
        self,
        tx: Tx,
        ledger_id: str,
        edited: tuple[str, str],
        user_id: str,
        team_id: str | None,
        ruling: Ruling,
        *,
        approve: bool,
        counts_for: Sequence[str] | None,
    ) -> DecisionOutcome:
        """`edited`: the new arguments and their digest. `approve=False`: the edit counts no
        approval (its preview is shown first)."""
        arguments, digest = edited
        named = ruling.named()
        row = await self._expire_if_due(tx, await self._locked_call(tx, ledger_id))
        why = edit_refusal(row)
        if why is not None:
            refusal = {"ledger_id": ledger_id, "decision": "edited", **named}
            await self._audit_call(tx, "refusal", row, {**refusal, "why": why.kind}, actor=user_id)
            return DecisionOutcome(recorded=False, row=row, why=why)
        needs = ruling.needs
        # The edited call is a new one: no approval given before counts.
        counted = tally(None, (), user_id if approve else None, needs, counts_for)
        approvals = list(counted.approvals)
        final = approve and not counted.missing
        await tx.execute(
            "UPDATE tool_calls SET edited_arguments = :arguments, edited_digest = :digest, "
            "edited_by = :user, approvals = :approvals, quorum = :quorum "
            "WHERE id = :id AND status = 'pending'",
            {
                "quorum": counted.state.model_dump_json(),
                "arguments": arguments,
                "digest": digest,
                "user": user_id,
                "approvals": self._db.list_in(approvals),
                "id": ledger_id,
            },
        )
        if final:
            await tx.execute(
                "UPDATE tool_calls SET status = 'approved', decided_by = :user, "
                "decided_team = :team, decided_at = :now WHERE id = :id "
                "AND status = 'pending'",
                {
                    "user": user_id,
                    "team": team_id,
                    "now": self._now(),
                    "id": ledger_id,
                },
            )
        summary = edit_summary(row, arguments, digest, ruling.required_approvals, final)
        details = {**summary, "approvals": len(approvals), **named, "team_id": team_id}
        await self._owe_redraw(tx, row)
        after = await self._call(tx, ledger_id)
        await self._audit_call(tx, "edited", row, details, actor=user_id)
        missing = counted.missing if len(needs) > 1 else ()
        why = None if final else MoreApprovalsNeeded(len(approvals), needs[0].needed, missing)
        return DecisionOutcome(recorded=True, row=after, why=why)

    # -- allowances ------------------------------------------------------------------------------

    async def create_allowance(
        self,
        *,
        channel_id: str,
        tool: str,
        shape: str,
        label: str,
        granted_by: str,
        ledger_id: str,
        expires_at: datetime,
    ) -> AllowanceRow:
        """A new allowance (`shape` is JSON); audited "allowance"."""
        grant = AllowanceGrant(
            channel_id=channel_id, tool=tool, shape=shape, label=label, expires_at=expires_at
        )
        async with self._db.transaction("create_allowance") as tx:
            return await self._insert_allowance(tx, grant, granted_by, ledger_id)

    async def allow_call(
        self,
        ledger_id: str,
        grant: AllowanceGrant,
        *,
        user_id: str,
        team_id: str | None = None,
        reason: str | None = None,
        ruling: Ruling = ONE_APPROVAL,
        digest: str | None = None,
    ) -> AllowOutcome:
        """ "Allow for": approve the call (one approval, as `decide` with `digest`) and, if that
        approves it, create the allowance `grant` granted by `user_id`, in one transaction: a
        crash leaves both or neither. Audited "decision" and "allowance"."""
        # One approval allows: the ruling names the rules, its quorum does not apply.
        alone = replace(ruling, required_approvals=1, requirements=())
        async with self._db.transaction("allow_call") as tx:
            decision = await decide_in(
                self,
                tx,
                ledger_id,
                "approved",
                user_id=user_id,
                team_id=team_id,
                reason=reason,
                ruling=alone,
                digest=digest,
            )
            made = None
            if decision.recorded and decision.row.status == "approved":
                await checkpoint("allow_decided")  # crash tests: approved, no allowance yet
                made = await self._insert_allowance(tx, grant, user_id, ledger_id)
        self._redraws_owed()
        return AllowOutcome(decision=decision, allowance=made)

    async def _insert_allowance(
        self, tx: Tx, grant: AllowanceGrant, granted_by: str, ledger_id: str
    ) -> AllowanceRow:
        allowance_id = new_id()[:12]
        until = aware(grant.expires_at)
        row = await tx.fetch_one(
            "INSERT INTO allowances (id, channel_id, tool, shape, label, granted_by, "
            "ledger_id, created_at, expires_at) VALUES (:id, :channel, :tool, :shape, :label, "
            ":granted_by, :ledger_id, :now, :until) RETURNING *",
            {
                "id": allowance_id,
                "channel": grant.channel_id,
                "tool": grant.tool,
                "shape": grant.shape,
                "label": grant.label,
                "granted_by": granted_by,
                "ledger_id": ledger_id,
                "now": self._now(),
                "until": self._db.time_in(until),
            },
        )
        await self._write_audit(
            tx,
            "allowance",
            actor=granted_by,
            details={
                "allowance_id": allowance_id,
                "channel": grant.channel_id,
                "tool": grant.tool,
                "shape": json.loads(grant.shape),
                "label": grant.label,
                "ledger_id": ledger_id,
                "expires_at": to_text(until),
            },
        )
        return _allowance(row)

    async def get_allowance(self, allowance_id: str) -> AllowanceRow | None:
        async with self._db.reading("get_allowance") as tx:
            row = await tx.fetch_one(
                "SELECT * FROM allowances WHERE id = :id", {"id": allowance_id}
            )
        return None if row is None else _allowance(row)

    async def active_allowances(
        self, *, channel_id: str | None = None, now: datetime | None = None
    ) -> list[AllowanceRow]:
        """Allowances not revoked and not yet expired at `now`, oldest first."""
        moment = aware(now) if now is not None else self._moment()
        sql = "SELECT * FROM allowances WHERE revoked_at IS NULL AND expires_at > :now"
        if channel_id is not None:
            sql += " AND channel_id = :channel"
        async with self._db.reading("active_allowances") as tx:
            rows = await tx.fetch_all(
                sql + " ORDER BY created_at, id",
                {"now": self._db.time_in(moment), "channel": channel_id},
            )
        return [_allowance(r) for r in rows]

    async def revoke_allowance(self, allowance_id: str, *, user_id: str) -> bool:
        """End an allowance now; conditional (False if already revoked or unknown)."""
        async with self._db.transaction("revoke_allowance") as tx:
            touched = await tx.execute(
                "UPDATE allowances SET revoked_at = :now, revoked_by = :user "
                "WHERE id = :id AND revoked_at IS NULL",
                {"now": self._now(), "user": user_id, "id": allowance_id},
            )
            if touched == 0:
                return False
            await self._write_audit(
                tx, "allowance_revoked", actor=user_id, details={"allowance_id": allowance_id}
            )
            return True
