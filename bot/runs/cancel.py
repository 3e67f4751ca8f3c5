"""Cancelling: a paused run or one going in this process (`cancel` in its thread, or a card's
Cancel run button), or a queued message before its run starts. The requester may always;
otherwise an approver. A going run is stopped through its deadline (`bot.runs.context`); the
driver closes it and tells the thread who stopped it."""

from __future__ import annotations

from typing import Literal

from ..store import NotWaiting, SessionRow
from .cards import Cards
from .context import RunContext
from .gate import audit_unknown, authorize_on, on_call
from .metrics import note_decision, note_run_ended
from .notices import (
    CancelledBeforeStart,
    NotAllowed,
    NothingCancelled,
    NothingToCancel,
    Notice,
    RunCancelled,
    UnknownRequest,
)
from .output import Thread
from .timeline import PausedTimelines

__all__ = ["Cancels"]


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
