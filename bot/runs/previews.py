"""Previews on the card: the deciding rule's read-only command, run before the card is
posted, shown on it and bound to its approval.

Approve binds to two digests: the call's and the preview's (the card's buttons carry both). When
the last needed approval arrives and the preview is older than the rule's `preview_ttl`, it is
run again first; if its output changed, the approval is refused ("the preview changed: look
again"), the approvals so far are reset (they were given on another output) and the card is
redrawn with the new preview. "Re-run preview" does the same on demand. Every run is audited
(`preview`). See docs/architecture.md, "Previews".
"""

from __future__ import annotations

from ..policy import GateDecision, PreviewPlan
from ..store import PreviewChanged, StoredPreview, ToolCallRow, already_reason
from ._preview_run import attach_preview, current_preview, run_plan
from .cards import Cards
from .context import RunContext
from .gate import audit_refusal, on_call, refusal_notice
from .notices import DecisionNotRecorded, Notice, UnknownRequest

__all__ = ["Previews"]


class Previews:
    """The preview steps of an approval and of "Re-run preview"."""

    def __init__(self, ctx: RunContext, cards: Cards) -> None:
        self.ctx = ctx
        self.cards = cards

    async def before_approval(
        self,
        row: ToolCallRow,
        decision: GateDecision,
        channel: str,
        user: str,
        rule: str | None = None,
    ) -> Notice | None:
        """Before recording `user`'s approval of `row`: if it is the last one needed and the
        preview is older than its `preview_ttl`, run it again; a changed output refuses the
        approval (a notice for `user`, a refusal row with `rule`, who may decide) and resets
        the approvals so far."""
        plan = decision.preview
        if plan is None or row.status != "pending" or user in row.approvals:
            return None
        required = self.ctx.policy.required_approvals_for(channel, decision)
        if len(row.approvals) + 1 < required:
            return None
        stored = current_preview(row, plan)
        if stored is not None and self.ctx.clock() - stored.ran_at <= plan.ttl:
            return None
        if not await self._refresh(row, plan, stored, why="stale", actor=user):
            return None
        await self.ctx.store.audit(
            "refusal",
            actor=user,
            session_id=row.session_id,
            call_id=row.call_id,
            details={
                "ledger_id": row.id,
                "decision": "approved",
                "why": "preview_changed",
                "rule": rule,
                "policy_rule": decision.policy_rule,
                "shown_preview_digest": None if stored is None else stored.digest,
            },
        )
        return DecisionNotRecorded(PreviewChanged())

    async def rerun(self, ledger_id: str, *, user: str, team: str | None) -> Notice | None:
        """ "Re-run preview": who may approve the call runs its preview again; the card is
        redrawn with it (a changed output resets the approvals so far)."""
        on = await on_call(self.ctx, ledger_id)
        if on is None:
            return UnknownRequest()
        row, decision = on.row, on.decision
        verdict = await on.authorize(self.ctx, "preview", user=user, team=team)
        if verdict.kind == "refused":
            await audit_refusal(
                self.ctx,
                on,
                user=user,
                team=team,
                reason=verdict.reason,
                rule=verdict.rule,
                action="preview",
            )
            return refusal_notice(verdict, row, decision)
        if row.status != "pending":
            await self.cards.refresh(row)
            return DecisionNotRecorded(already_reason(row))
        if decision.preview is None:
            return None  # the policy no longer declares one: nothing to run
        plan = decision.preview
        await self._refresh(row, plan, current_preview(row, plan), why="rerun", actor=user)
        return None

    async def _refresh(
        self,
        row: ToolCallRow,
        plan: PreviewPlan,
        stored: StoredPreview | None,
        why: str,
        actor: str,
    ) -> bool:
        """Run the preview again, store it and redraw the card; True when its output changed
        (then the approvals so far are dropped)."""
        fresh = await run_plan(self.ctx, plan)
        changed = stored is None or fresh.digest != stored.digest
        updated = await self.ctx.store.set_preview(
            row.id, fresh, why=why, actor=actor, reset_approvals=changed
        )
        if updated is not None and changed:  # its redraw was written with the preview
            await attach_preview(self.ctx, updated, fresh)
        return changed and updated is not None
