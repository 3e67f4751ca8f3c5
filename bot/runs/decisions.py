"""Approve and Reject on a card: who may (`bot.approvals`), the conditional record in the store,
the card's redraw (in the background: an approved call never waits for Slack), and the resume
once the batch is decided.

The preview bound to an approval (`Previews`: run again when stale at the last approval, a
changed one refusing it) is a step of the decision, so it is here; running a preview and what
the card shows of it are `bot.runs.previews`, which the cards use before a card is posted.
Cancelling a run (`Cancels`) is the other answer a person gives a paused run: the same gate,
the same card redraws, its waiting calls answered all at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from ..approvals import GateAction
from ..policy import GateDecision, PreviewPlan
from ..store import (
    MoreApprovalsNeeded,
    NotWaiting,
    PreviewChanged,
    SessionRow,
    StoredPreview,
    ToolCallRow,
    already_reason,
)
from .cards import Cards
from .context import RunContext, thread_of
from .gate import (
    acting_for,
    audit_refusal,
    audit_unknown,
    authorize_on,
    call_lock,
    on_call,
    refusal_notice,
    ruling,
)
from .metrics import note_decision, note_run_ended
from .notices import (
    CancelledBeforeStart,
    DecisionNotRecorded,
    NotAllowed,
    NothingCancelled,
    NothingToCancel,
    Notice,
    RunCancelled,
    UnknownRequest,
)
from .output import Thread
from .previews import attach_preview, current_preview, run_plan
from .timeline import PausedTimelines

__all__ = [
    "Cancels",
    "Decisions",
    "Previews",
]


class Decisions:
    """The decision steps of `RunService` (see the module docstring)."""

    def __init__(
        self,
        ctx: RunContext,
        cards: Cards,
        resume: Callable[[str], Awaitable[bool]],
        timelines: PausedTimelines | None = None,
    ) -> None:
        self.ctx = ctx
        self.cards = cards
        self.maybe_resume = resume
        self.timelines = timelines or PausedTimelines()
        """Paused runs' timelines: a partial approval moves its task's count on."""
        self.previews = Previews(ctx, cards)
        """The preview bound to an approval, and "Re-run preview"."""

    async def decide(
        self,
        ledger_id: str,
        decision: Literal["approved", "rejected"],
        *,
        user: str,
        team: str | None,
        reason: str | None = None,
        digest: str | None = None,
        preview_digest: str | None = None,
    ) -> Notice | None:
        """Record a decision. Returns a notice for the decider alone when nothing changed.
        `digest` is what the clicked card showed: a click on a card drawn before an edit does
        not count toward the edited call (the store checks it, in the decision's transaction);
        `preview_digest` the same for the preview's output (see `previews.py`)."""
        store = self.ctx.store
        on = await on_call(self.ctx, ledger_id)
        if on is None:
            await audit_unknown(self.ctx, ledger_id, user=user)
            return UnknownRequest()
        row, session, policy = on.row, on.session, on.decision
        action: GateAction = "approve" if decision == "approved" else "reject"
        verdict = await on.authorize(self.ctx, action, user=user, team=team)
        delegate = None
        if verdict.kind == "refused" and verdict.reason == "not_an_approver":
            found = await acting_for(self.ctx, on, user, team, action)
            if found is not None:  # "U2 for U1": the approval is U1's, U2 is the actor
                delegate, (user, verdict) = user, found
        if verdict.kind == "refused":
            locked = verdict.reason == "card_locked"
            await audit_refusal(
                self.ctx,
                on,
                user=user,
                team=team,
                reason=call_lock(row, policy) if locked else verdict.reason,
                rule=verdict.rule,
                decision=decision,
            )
            if verdict.reason == "card_locked":
                await self.cards.refresh(row)
            return refusal_notice(verdict, row, policy)
        if decision == "approved":
            stale = await self.previews.before_approval(
                row, policy, session.channel_id, user, rule=verdict.rule
            )
            if stale is not None:
                return stale
        ruled = ruling(self.ctx, session.channel_id, policy, verdict.rule)
        needed = ruled.required_approvals
        outcome = await store.decide(
            ledger_id,
            decision,
            user_id=user,
            team_id=team,
            reason=reason,
            ruling=ruled,
            digest=digest,
            preview_digest=preview_digest,
            # Every requirement at once; the clicker counts toward those that name them.
            counts_for=verdict.counts or None,
            delegate=delegate,
        )
        # A recorded decision's redraw was written with it (the outbox sends it). A click that
        # changed nothing redraws the card too: one still showing buttons for a decided (or
        # just expired) call must lose them. In the background: the approved call must not
        # wait for Slack to redraw a card.
        if not outcome.recorded:
            self._redraw_soon(outcome.row)
        if outcome.recorded and outcome.row.status == "pending":
            self._count_soon(outcome.row, _still_needed(outcome.row, outcome.why, needed))
        if outcome.recorded and outcome.row.status in ("approved", "rejected"):
            note_decision(self.ctx, outcome.row, outcome.row.status)
        await self.maybe_resume(row.session_id)
        if not outcome.recorded:
            return DecisionNotRecorded(outcome.why or already_reason(outcome.row))
        return None

    def _count_soon(self, row: ToolCallRow, needed: int) -> None:
        """A partial approval: the paused run's timeline shows the new count (background,
        like the card's redraw)."""
        timeline = self.timelines.get(row.session_id)
        if timeline is not None and not self.ctx.tasks.closed:
            self.ctx.tasks.spawn(timeline.approved(row, needed), name=f"count {row.id}")

    def _redraw_soon(self, row: ToolCallRow) -> None:
        if self.ctx.tasks.closed:
            return  # stopping: the next start-up redraws cards whose state changed
        self.ctx.tasks.spawn(self.cards.refresh(row), name=f"redraw {row.id}")

    async def check_reject(self, ledger_id: str, *, user: str, team: str | None) -> Notice | None:
        """Before asking a reason to reject: None if `user` may reject the call now; else why
        not (and a decided call's card is redrawn, in case it still shows its buttons)."""
        on = await on_call(self.ctx, ledger_id)
        if on is None:
            return UnknownRequest()
        if on.row.status != "pending":
            await self.cards.refresh(on.row)
            return DecisionNotRecorded(already_reason(on.row))
        verdict = await on.authorize(self.ctx, "reject", user=user, team=team)
        return NotAllowed(verdict) if verdict.kind == "refused" else None

    async def thread_of_call(self, ledger_id: str) -> Thread | None:
        """The thread a card's call belongs to (to tell a decider something privately)."""
        row = await self.ctx.store.get_call(ledger_id)
        return None if row is None else await thread_of(self.ctx, row)


def _still_needed(row: ToolCallRow, why: object, needed: int) -> int:
    """How many approvals the timeline counts toward: with several rules to meet, those so
    far plus each rule's shortfall, else the deciding rule's quorum."""
    if isinstance(why, MoreApprovalsNeeded) and why.missing:
        return len(row.approvals) + sum(s.needed - s.have for s in why.missing)
    return needed


# -- the preview bound to an approval ---------------------------------------------------------
# Previews on the card: the deciding rule's read-only command, run before the card is
# posted, shown on it and bound to its approval.
#
# Approve binds to two digests: the call's and the preview's (the card's buttons carry both). When
# the last needed approval arrives and the preview is older than the rule's `preview_ttl`, it is
# run again first; if its output changed, the approval is refused ("the preview changed: look
# again"), the approvals so far are reset (they were given on another output) and the card is
# redrawn with the new preview. "Re-run preview" does the same on demand. Every run is audited
# (`preview`). See docs/architecture.md, "Previews".


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


# -- cancel and withdraw ----------------------------------------------------------------------
# Cancelling: a paused run or one going in this process (`cancel` in its thread, or a card's
# Cancel run button), or a queued message before its run starts. The requester may always;
# otherwise an approver. A going run is stopped through its deadline (`bot.runs.context`); the
# driver closes it and tells the thread who stopped it.


class Cancels:
    def __init__(
        self, ctx: RunContext, cards: Cards, timelines: PausedTimelines | None = None
    ) -> None:
        self.ctx = ctx
        self.cards = cards
        self.timelines = timelines or PausedTimelines()
        """Paused runs' timelines: a cancelled one shows its calls not run, and closes."""

    async def cancel(
        self,
        session: SessionRow,
        *,
        user: str,
        team: str | None = None,
        via: Literal["message", "button"],
        batch_id: str | None = None,
    ) -> Notice | None:
        store = self.ctx.store
        verdict = await authorize_on(self.ctx, "cancel", user=user, team=team, session=session)
        if verdict.kind == "refused":
            await store.audit(
                "refusal",
                actor=user,
                session_id=session.id,
                details={
                    "action": "cancel",
                    "via": via,
                    "why": verdict.reason,
                    "rule": verdict.rule,
                    "policy_rule": None,
                    "batch_id": batch_id or session.batch_id,
                    "ledger_ids": await self._ledger_ids(session.id),
                    "team_id": team,
                },
            )
            return NotAllowed(verdict)
        if self.ctx.live.cancel(session.id, by=user):
            return None
        outcome = await store.cancel_batch(
            session.id, user_id=user, batch_id=batch_id, team_id=team, via=via, rule=verdict.rule
        )
        if not outcome.cancelled:
            return NothingCancelled(outcome.why or NotWaiting(session.state))
        note_run_ended(self.ctx, session.id, "cancelled")
        for row in outcome.rows:
            if row.status == "cancelled":  # answered without running, as a resumed run would
                self.ctx.observer.tool_finished(row.name, "cancelled", 0.0)
            if row.needs_approval and row.status == "cancelled":
                note_decision(self.ctx, row, "cancelled")
        await self.timelines.close(session.id, outcome.rows)
        thread = Thread.of(session)
        await self.ctx.output.say(thread, RunCancelled(user))
        return None

    async def from_card(self, ledger_id: str, *, user: str, team: str | None) -> Notice | None:
        on = await on_call(self.ctx, ledger_id)
        if on is None:
            await audit_unknown(self.ctx, ledger_id, user=user)
            return UnknownRequest()
        return await self.cancel(
            on.session, user=user, team=team, via="button", batch_id=on.row.batch_id
        )

    async def _ledger_ids(self, session_id: str) -> list[str]:
        """The gated calls of the session's batch, for an audit row about the whole run."""
        rows = await self.ctx.store.batch_calls(session_id)
        return [row.id for row in rows if row.needs_approval]

    async def from_message(self, thread: Thread, *, user: str, team: str | None) -> None:
        """`cancel` written in a thread: the paused run, or the queued message, is withdrawn.
        The same rules as the Cancel run button: `team` is the author's workspace."""
        store = self.ctx.store
        output = self.ctx.output
        session = await store.find_session(thread.team_id, thread.channel_id, thread.thread_ts)
        going = session is not None and session.id in self.ctx.live
        if session is not None and (going or session.state == "awaiting_approval"):
            refusal = await self.cancel(session, user=user, team=team, via="message")
            if refusal is not None:
                await output.tell(thread, user, refusal)
            return
        queued = None if session is None else await store.queued_item(session.id)
        if session is None or queued is None:
            await output.tell(thread, user, NothingToCancel())
            return
        verdict = await authorize_on(
            self.ctx, "withdraw", user=user, team=team, session=session, requester=queued.requester
        )
        if verdict.kind == "refused":
            await output.tell(thread, user, NotAllowed(verdict))
            return
        if await store.cancel_queued(session.id, user_id=user) is not None:
            await output.say(thread, CancelledBeforeStart(user))
