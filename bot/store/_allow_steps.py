"""The allowance steps both backends share: the same transaction shape, over each backend's own
`_transaction`, `_decide_in` and `_insert_allowance` (its SQL). Approving a call and creating
its allowance happen in ONE transaction, so a crash cannot leave one without the other."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Literal, Protocol

from .._faults import checkpoint
from .models import AllowanceGrant, AllowanceRow, AllowOutcome, DecisionOutcome

__all__ = ["AllowSteps"]


class _Backend(Protocol):
    """What a backend provides for these steps (its connection type is its own)."""

    def _transaction(self, what: str) -> AbstractAsyncContextManager[Any]: ...

    async def _decide_in(
        self,
        conn: Any,
        ledger_id: str,
        decision: Literal["approved", "rejected"],
        *,
        user_id: str,
        team_id: str | None,
        reason: str | None,
        required_approvals: int,
        rule: str | None,
        policy_rule: str | None,
        digest: str | None,
    ) -> DecisionOutcome: ...

    async def _insert_allowance(
        self, conn: Any, grant: AllowanceGrant, granted_by: str, ledger_id: str
    ) -> AllowanceRow: ...


class AllowSteps:
    """`create_allowance` and `allow_call` of the `Store` contract, for any backend."""

    async def create_allowance(
        self: _Backend,
        *,
        channel_id: str,
        tool: str,
        shape: str,
        label: str,
        granted_by: str,
        ledger_id: str,
        expires_at: datetime,
    ) -> AllowanceRow:
        grant = AllowanceGrant(
            channel_id=channel_id, tool=tool, shape=shape, label=label, expires_at=expires_at
        )
        async with self._transaction("create_allowance") as conn:
            return await self._insert_allowance(conn, grant, granted_by, ledger_id)

    async def allow_call(
        self: _Backend,
        ledger_id: str,
        grant: AllowanceGrant,
        *,
        user_id: str,
        team_id: str | None = None,
        reason: str | None = None,
        rule: str | None = None,
        policy_rule: str | None = None,
        digest: str | None = None,
    ) -> AllowOutcome:
        async with self._transaction("allow_call") as conn:
            decision = await self._decide_in(
                conn,
                ledger_id,
                "approved",
                user_id=user_id,
                team_id=team_id,
                reason=reason,
                required_approvals=1,
                rule=rule,
                policy_rule=policy_rule,
                digest=digest,
            )
            if not decision.recorded or decision.row.status != "approved":
                return AllowOutcome(decision=decision)
            await checkpoint("allow_decided")  # crash tests: approved, allowance not yet written
            made = await self._insert_allowance(conn, grant, user_id, ledger_id)
        return AllowOutcome(decision=decision, allowance=made)
