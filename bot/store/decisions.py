"""Decisions on gated calls (first writer wins, N of M approvals), what a resume is told, and
cancelling a paused batch.

Every writer of a call locks its session and then the call (`Db.for_update`, a no-op where the
transaction is already the only writer), so a decision racing another decision, an edit, an
expiry or a cancel on any replica has one winner and the losers get a typed reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from agent_core.approvals import close_batch
from bot.settings import checkpoint

from .core import StoreCore
from .db import Row, Tx
from .models import (
    ONE_APPROVAL,
    AlreadyApprovedByYou,
    CancelOutcome,
    DecisionOutcome,
    DecisionReason,
    MoreApprovalsNeeded,
    NeedsNoApproval,
    PendingApproval,
    PreviewChanged,
    Ruling,
    SessionRow,
    StoredPreview,
    ToolCallRow,
)
from .rules import (
    Tally,
    already,
    arguments_changed,
    cancel_outcome,
    cancel_refusal,
    counting,
    tally,
)

__all__ = ["Decisions", "decide_in"]

_SESSION_COLUMNS = (
    "id",
    "team_id",
    "channel_id",
    "thread_ts",
    "state",
    "requester",
    "error",
    "batch_id",
    "created_at",
    "updated_at",
)

_PENDING = (
    "SELECT t.*, "
    + ", ".join(f"s.{c} AS s__{c}" for c in _SESSION_COLUMNS)
    + " FROM tool_calls AS t JOIN sessions AS s "
    "ON s.id = t.session_id AND s.batch_id = t.batch_id "
    "WHERE t.status = 'pending' AND t.needs_approval "
    "AND s.state = 'awaiting_approval' ORDER BY t.created_at, t.position"
)
"""Every undecided gated call of a paused batch with its session's columns (`s__` prefixed),
in one statement: the Home tab and the pending list read it after every click."""


def _check_decision(decision: str) -> None:
    if decision not in ("approved", "rejected"):
        raise ValueError(f"decision must be 'approved' or 'rejected', not {decision!r}")


def _preview_changed(row: ToolCallRow, decision: str, shown: str | None) -> PreviewChanged | None:
    """An approval from a card that showed preview digest `shown` while the call's preview is
    now another (run again since): it must not count."""
    stored = row.preview_run()
    if decision != "approved" or shown is None or stored is None or shown == stored.digest:
        return None
    return PreviewChanged()


def _audited(count: Tally) -> list[dict[str, Any]]:
    """Each requirement on the decision's audit row: its key, quorum and who counts toward
    it."""
    needs, counts = count.state.needs, count.state.counts
    return [
        {
            "key": need.key,
            "label": need.label,
            "required_approvals": need.needed,
            "approvals": list(users),
        }
        for need, users in counting(needs, count.approvals, counts)
    ]


async def _refusal(
    store: StoreCore, tx: Tx, row: ToolCallRow, decision: str, user_id: str
) -> DecisionReason | None:
    """Why this decision cannot be recorded (expiring the call if its time is up), or None."""
    if not row.needs_approval:
        return NeedsNoApproval()
    if (expired := await store._expire_if_due(tx, row)) is not row:
        return already(expired)
    if row.status != "pending":
        return already(row)
    if decision == "approved" and user_id in row.approvals:
        return AlreadyApprovedByYou()
    return None


async def decide_in(
    store: StoreCore,
    tx: Tx,
    ledger_id: str,
    decision: Literal["approved", "rejected"],
    *,
    user_id: str,
    team_id: str | None,
    reason: str | None,
    ruling: Ruling,
    digest: str | None,
    preview_digest: str | None = None,
    counts_for: Sequence[str] | None = None,
    delegate: str | None = None,
) -> DecisionOutcome:
    """`Decisions.decide` inside the caller's transaction: the one decision step, which
    "Allow for" (`Edits.allow_call`, with the allowance) and breaking glass
    (`Freezes.break_glass`, with its record and notice) take in theirs too. `delegate`: who
    clicked for `user_id` (audited as the actor, with `acting_for`)."""
    needs = ruling.needs
    row = await store._locked_call(tx, ledger_id)
    why = (
        await _refusal(store, tx, row, decision, user_id)
        or arguments_changed(row, digest)
        or _preview_changed(row, decision, preview_digest)
    )
    stored = row.preview_run()
    common: dict[str, Any] = {
        "ledger_id": ledger_id,
        "tool": row.name,
        "digest": row.digest,
        "decision": decision,
        **ruling.named(),
        "preview_digest": None if stored is None else stored.digest,
        "reason": reason,
        "team_id": team_id,
    }
    actor = user_id
    if delegate is not None:
        common["acting_for"], actor = user_id, delegate
    if why is not None:
        details = {**common, "why": why.kind, "shown_digest": digest}
        after = await store._call(tx, ledger_id)
        await store._audit_call(tx, "refusal", row, details, actor=actor)
        return DecisionOutcome(recorded=False, row=after, why=why)
    approved = decision == "approved"
    count = tally(
        row.quorum_state(), row.approvals, user_id if approved else None, needs, counts_for
    )
    approvals = list(count.approvals)
    final = not approved or not count.missing
    state = count.state.model_dump_json()
    db = store._db
    if final:
        await tx.execute(
            "UPDATE tool_calls SET status = :decision, decided_by = :user, "
            "decided_team = :team, decided_at = :now, reason = :reason, "
            "approvals = :approvals, quorum = :quorum WHERE id = :id AND status = 'pending'",
            {
                "quorum": state,
                "decision": decision,
                "user": user_id,
                "team": team_id,
                "now": store._now(),
                "reason": reason,
                "approvals": db.list_in(approvals),
                "id": ledger_id,
            },
        )
    else:
        await tx.execute(
            "UPDATE tool_calls SET approvals = :approvals, quorum = :quorum WHERE id = :id "
            "AND status = 'pending'",
            {"approvals": db.list_in(approvals), "quorum": state, "id": ledger_id},
        )
        missing = count.missing if len(needs) > 1 else ()
        why = MoreApprovalsNeeded(len(approvals), needs[0].needed, missing)
    counts: dict[str, Any] = {"approvals": len(approvals), "final": final}
    details = {**common, **counts, "required_approvals": needs[0].needed}
    if len(needs) > 1:
        details["requirements"] = _audited(count)
    # The audit row last: on PostgreSQL it locks the chain's head until the commit.
    after = await store._call(tx, ledger_id)
    await store._owe_redraw(tx, row)  # the card's redraw commits with the decision
    await store._audit_call(tx, "decision", row, details, actor=actor)
    return DecisionOutcome(recorded=True, row=after, why=why)


class Decisions(StoreCore):
    """Deciding a gated call, its preview, what the pending list reads, cancelling a batch."""

    async def decide(
        self,
        ledger_id: str,
        decision: Literal["approved", "rejected"],
        *,
        user_id: str,
        team_id: str | None = None,
        reason: str | None = None,
        ruling: Ruling = ONE_APPROVAL,
        digest: str | None = None,
        preview_digest: str | None = None,
        counts_for: Sequence[str] | None = None,
        delegate: str | None = None,
    ) -> DecisionOutcome:
        """Record a decision if the call is still pending: conditional, first writer wins.
        `delegate`: who clicked for `user_id` (a delegation; the audit's actor, with
        `acting_for`).

        `ruling`: what the policy ruled (`bot.store.models.Ruling`): every requirement the call
        must meet at once; `counts_for`: the keys of those the decider's approval counts
        toward (None: the first). They are stored with the call (`ToolCallRow.quorum`), and
        the call is approved, in this transaction, once each requirement has its distinct
        approvers (`bot.store.rules.tally`); `MoreApprovalsNeeded.missing` says what is not met.

        `digest` is what the decider's card showed: if the pending call now runs other
        arguments (edited since), nothing is recorded (`ArgumentsChanged`); `preview_digest`
        likewise for its preview's output (`PreviewChanged`: run again since, and changed). An
        approval adds `user_id` to the distinct approvers and approves the call once there are
        enough; one rejection rejects it. A call past its expiry is expired here instead
        (audited "expiry"). Audited "decision" or "refusal" (with the ruling's `rule`, who may
        decide, `policy_rule`, the policy rule `tools.<tool>.rules[<i>]` that gated it, and
        `policy_match`, what that rule matches: its prefix and pattern in words). `why` tells
        a loser who won and when, or how many approvals are missing."""
        _check_decision(decision)
        async with self._db.transaction("decide") as tx:
            outcome = await decide_in(
                self,
                tx,
                ledger_id,
                decision,
                user_id=user_id,
                team_id=team_id,
                reason=reason,
                ruling=ruling,
                digest=digest,
                preview_digest=preview_digest,
                counts_for=counts_for,
                delegate=delegate,
            )
        self._redraws_owed()
        return outcome

    # -- previews ----------------------------------------------------------------------------------

    async def set_preview(
        self,
        ledger_id: str,
        preview: StoredPreview,
        *,
        why: str,
        actor: str | None = None,
        reset_approvals: bool = False,
    ) -> ToolCallRow | None:
        """Store a run of the call's preview and audit it ("preview": digest, exit status,
        duration, `why` it ran); `reset_approvals` drops the approvals so far (they were
        given on another preview). None when the call is no longer pending (nothing stored).
        The card's redraw (`CARD_REDRAW`) commits with it."""
        async with self._db.transaction("set_preview") as tx:
            updated = await self._set_preview_in(
                tx, ledger_id, preview, why, actor, reset_approvals
            )
        if updated is not None:
            self._redraws_owed()
        return updated

    async def _set_preview_in(
        self,
        tx: Tx,
        ledger_id: str,
        preview: StoredPreview,
        why: str,
        actor: str | None,
        reset_approvals: bool,
    ) -> ToolCallRow | None:
        """`set_preview` in its transaction; the card shows the preview (and the approvals
        reset), so its redraw is owed in it too."""
        row = await self._locked_call(tx, ledger_id)
        if row.status != "pending":
            return None
        dropped = list(row.approvals) if reset_approvals else []
        await tx.execute(
            "UPDATE tool_calls SET preview = :preview"
            + (", approvals = :approvals" if reset_approvals else "")
            + " WHERE id = :id AND status = 'pending'",
            {
                "preview": preview.model_dump_json(),
                "id": ledger_id,
                **({"approvals": self._db.list_in([])} if reset_approvals else {}),
            },
        )
        await checkpoint("preview_stored")  # crash tests: stored, its redraw not yet owed
        details: dict[str, Any] = {
            "ledger_id": ledger_id,
            "tool": row.name,
            "digest": preview.digest,
            "exit_status": preview.exit_status,
            "seconds": round(preview.seconds, 3),
            "failed": preview.failed,
            "argv": list(preview.argv),
            **({"inputs": [i.model_dump() for i in preview.inputs]} if preview.inputs else {}),
            **(
                {"preview_tool": preview.tool, "preview_arguments": preview.arguments}
                if preview.tool is not None
                else {}
            ),
            "why": why,
            "approvals_reset": dropped,
        }
        await self._owe_redraw(tx, row)
        await self._audit_call(tx, "preview", row, details, actor=actor)
        return await self._call(tx, ledger_id)

    # -- what a resume and the pending list read ---------------------------------------------------

    async def pending_approvals(self) -> list[PendingApproval]:
        """Every gated call still undecided in a paused run, oldest first, with its session."""
        async with self._db.reading("pending_approvals") as tx:
            rows = await tx.fetch_all(_PENDING)
        pending: list[PendingApproval] = []
        for row in rows:
            data = dict(row)
            session = {k[3:]: data.pop(k) for k in list(data) if k.startswith("s__")}
            call = self._call_model(data)
            pending.append(PendingApproval(call=call, session=self._session_model(session)))
        return pending

    async def sessions_awaiting_approval(self) -> list[SessionRow]:
        """Paused sessions; at start-up the bot resumes those already decided."""
        async with self._db.reading("sessions_awaiting_approval") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM sessions WHERE state = 'awaiting_approval' ORDER BY updated_at"
            )
        return [self._session_model(row) for row in rows]

    # -- cancelling a paused batch -----------------------------------------------------------------

    async def cancel_batch(
        self,
        session_id: str,
        *,
        user_id: str,
        batch_id: str | None = None,
        team_id: str | None = None,
        via: str = "message",
        rule: str | None = None,
    ) -> CancelOutcome:
        """End a paused run without running anything of its batch, in one transaction.

        Conditional (awaiting_approval -> idle): of a cancel racing the resume claim or another
        cancel, one wins. Pending and approved calls become `cancelled`; the batch is closed
        (`agent_core.approvals.close_batch`) with each call's outcome. With `batch_id`, applies
        only to that batch. Audited "cancel" per call, or one "refusal"."""
        async with self._db.transaction("cancel_batch") as tx:
            session = await self._session(tx, session_id, lock=True)
            current = session["batch_id"]
            why = cancel_refusal(batch_id, current, session["state"], moved=False)
            if why is None:
                touched = await tx.execute(
                    "UPDATE sessions SET state = 'idle', error = NULL, instance_id = NULL, "
                    "updated_at = :now WHERE id = :id AND state = 'awaiting_approval' "
                    "AND batch_id IS NOT DISTINCT FROM :batch_id",
                    {"now": self._now(), "id": session_id, "batch_id": current},
                )
                why = cancel_refusal(None, None, session["state"], moved=touched == 0)
            target = batch_id if batch_id is not None else current
            before = [
                self._call_model(row)
                for row in await tx.fetch_all(
                    "SELECT * FROM tool_calls WHERE batch_id = :batch_id ORDER BY position"
                    + self._db.for_update,
                    {"batch_id": target},
                )
            ]
            if why is not None:
                await self._write_audit(
                    tx,
                    "refusal",
                    actor=user_id,
                    session_id=session_id,
                    details={
                        "action": "cancel",
                        "via": via,
                        "why": why.kind,
                        "rule": rule,
                        "policy_rule": None,
                        "batch_id": target,
                        "ledger_ids": [r.id for r in before if r.needs_approval],
                    },
                )
                return CancelOutcome(cancelled=False, rows=before, why=why)
            await self._cancel_calls(tx, session, before, user_id, team_id, via, rule)
            after = [await self._call(tx, row.id) for row in before]
        self._redraws_owed()
        return CancelOutcome(cancelled=True, rows=after)

    async def _cancel_calls(
        self,
        tx: Tx,
        session: Row,
        before: list[ToolCallRow],
        user_id: str,
        team_id: str | None,
        via: str,
        rule: str | None,
    ) -> None:
        who = self._person(user_id)
        now = self._now()
        for row in before:
            if row.status not in ("pending", "approved"):
                continue
            await tx.execute(
                "UPDATE tool_calls SET status = 'cancelled', decided_by = :user, "
                "decided_team = :team, decided_at = :now, reason = :reason "
                "WHERE id = :id AND status = :status",
                {
                    "user": user_id,
                    "team": team_id,
                    "now": now,
                    "reason": f"cancelled by {who}",
                    "id": row.id,
                    "status": row.status,
                },
            )
            details: dict[str, Any] = {
                "ledger_id": row.id,
                "batch_id": row.batch_id,
                "tool": row.name,
                "digest": row.digest,
                "previous_status": row.status,
                "via": via,
                "rule": rule,
            }
            await self._write_audit(
                tx,
                "cancel",
                actor=user_id,
                session_id=session["id"],
                call_id=row.call_id,
                details=details,
            )
            await self._owe_redraw(tx, row)
        tail = await self._latest_batch_messages(tx, session["id"], session["last_calls_seq"])
        outcome = cancel_outcome({row.call_id: row for row in before}, who, self._person)
        answers = close_batch(tail, outcome)
        if answers:
            await self._append(tx, session["id"], answers)
