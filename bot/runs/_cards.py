"""Approval cards: built from ledger rows, posted when a run pauses, redrawn on every change.

A card must never keep buttons for a decided call: every decision redraws its card, a click
on a decided card redraws it, and start-up redraws every card whose drawn state (the ledger's
`card_drawn`) differs from its call's (the process may have died between recording a decision
or a cancel and redrawing).
"""

from __future__ import annotations

import logging
from typing import Literal

from .._duration import format_duration
from ..store import ToolCallRow, card_state
from ..tools import tool_summary
from ._allow import allow_choices, allow_window, scope
from ._card_retry import CardRetries
from ._context import RunContext, thread_of
from ._gate_audit import audit_gate_rule, call_decision, forbidden_reason
from ._server_tool import server_tool
from .cards import CardCall, CardOutcome, CardRef
from .notices import CallLink, CardNotPosted
from .output import PostFailed, Thread

__all__ = ["Cards"]

logger = logging.getLogger("opsgate.runs")


class Cards:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.retries = CardRetries(ctx, self._adopt_or_post)
        """Background tries for a card Slack refused."""

    def card_call(self, row: ToolCallRow, batch: list[ToolCallRow], channel: str) -> CardCall:
        tool = self.ctx.tools.get(row.tool)
        decision = call_decision(self.ctx, row)
        window = allow_window(self.ctx, row, channel)
        approvers = self.ctx.policy.approvers_for(channel, decision)
        return CardCall(
            ledger_id=row.id,
            tool=row.tool,
            # For the people deciding: a line about the tool, not the text for the model.
            description=tool_summary(tool) if tool else "",
            arguments=row.running_arguments(),
            digest=row.running_digest,
            requested_by=row.requested_by,
            call_id=row.call_id,
            held=tuple((r.tool, r.arguments_value()) for r in batch if not r.needs_approval),
            required_approvals=self.ctx.policy.required_approvals_for(channel, decision),
            approvals=tuple(row.approvals),
            server_tool=server_tool(tool),
            edited_by=row.edited_by,
            original_arguments=row.arguments_value() if row.edited_arguments else None,
            can_edit=self.ctx.policy.tool_policy(row.tool).allow_edit,
            allow_for=None if window is None else format_duration(window),
            allow_scope=scope(row, decision) if window is not None else "",
            allow_dialog=window is not None and bool(allow_choices(self.ctx, row)),
            locked="forbidden" if decision.forbidden else row.card_locked,
            expires_at=row.expires_at,
            approver_users=approvers.users,
            approver_groups=approvers.groups,
            policy_rule=decision.rule if decision.policy_rule is not None else None,
            justification=decision.justification,
        )

    async def link(self, row: ToolCallRow) -> CallLink:
        ref = _ref(row)
        return CallLink(row.tool, None if ref is None else await self.ctx.output.permalink(ref))

    async def post_all(self, thread: Thread, session_id: str) -> bool:
        """The paused batch's cards, each with its deadline set first (the deciding rule's
        `ttl`, else the default). A forbidden call's card has no Approve and the call is
        rejected at once with the rule's justification; True when that happened (the batch
        may be complete: the caller resumes it once this run has ended)."""
        store = self.ctx.store
        batch = await store.batch_calls(session_id)
        refused = False
        for row in batch:
            if not row.needs_approval or row.card_ts is not None:
                continue
            decision = call_decision(self.ctx, row)
            if row.expires_at is None:
                expires_at = self.ctx.clock() + self.ctx.policy.ttl_for(decision)
                await store.set_expiry(row.id, expires_at)
                await audit_gate_rule(self.ctx, row)
                row = row.model_copy(update={"expires_at": expires_at})
                self.ctx.deadline_set()
            await self.post(thread, row, batch)
            if decision.forbidden and row.status == "pending":
                outcome = await store.decide(
                    row.id,
                    "rejected",
                    user_id="",
                    reason=forbidden_reason(decision),
                    rule="policy: forbidden",
                    policy_rule=decision.policy_rule,
                )
                refused = refused or outcome.recorded
                await self.refresh(outcome.row)
        return refused

    async def post(
        self, thread: Thread, row: ToolCallRow, batch: list[ToolCallRow], *, adopt: bool = False
    ) -> None:
        """Post one card. If that fails, say so in the thread and try again in the background
        (`bot.runs._card_retry`): the call still expires on time, `cancel` still works, and the
        next start-up tries again too. `adopt`: a card may already be in the thread (see
        `_adopt_or_post`)."""
        post = self._adopt_or_post if adopt else self._post_once
        error = await post(thread, row, batch)
        if error is not None:
            await self.ctx.output.say(thread, CardNotPosted(row.tool, error))
            self.retries.start(thread, row, error)

    async def _post_once(
        self, thread: Thread, row: ToolCallRow, batch: list[ToolCallRow]
    ) -> str | None:
        card = self.card_call(row, batch, thread.channel_id)
        posted = await self.ctx.output.post_card(thread, card)
        match posted:
            case PostFailed(error=error):
                logger.error("could not post the card for %s: %s", row.id, error)
                return error
            case CardRef(channel_id=channel, ts=ts, locked=locked):
                await self.ctx.store.set_card(row.id, channel, ts, locked=locked)
                await self.ctx.store.card_drawn(row.id, card_state(row))
        return None

    async def _adopt_or_post(
        self, thread: Thread, row: ToolCallRow, batch: list[ToolCallRow]
    ) -> str | None:
        """Post a card that an earlier try may have posted already (a kill -9 or a timeout
        while Slack answered): a card of this call found in the thread is adopted, stored
        and redrawn as the call's current state, instead of a second card being posted."""
        found = await self.ctx.output.find_card(thread, row.id)
        if found is None:
            return await self._post_once(thread, row, batch)
        logger.info("adopting the card already posted for %s", row.id)
        await self.ctx.store.set_card(row.id, found.channel_id, found.ts, locked=found.locked)
        adopted = await self.ctx.store.get_call(row.id)
        if adopted is not None:
            await self.refresh(adopted)
        return None

    async def refresh(self, row: ToolCallRow) -> None:
        """Redraw a card: no buttons once decided, progress while N-of-M."""
        ref = _ref(row)
        if ref is None:
            return
        batch = await self.ctx.store.batch_calls(row.session_id)
        card = self.card_call(row, batch, ref.channel_id)
        outcome = None
        if row.status != "pending":
            status = _card_status(row.status)
            outcome = CardOutcome(
                status=status,
                decided_by=row.decided_by,
                decided_at=row.decided_at or self.ctx.clock(),
                # "cancelled by <@U>" is what the card says already; the reason would repeat it.
                reason=None if status == "cancelled" else row.reason,
            )
        if await self.ctx.output.update_card(ref, card, outcome) is None:
            await self.ctx.store.card_drawn(row.id, card_state(row))

    async def repost_missing(self) -> None:
        """A card whose post failed (or that a crash kept from being posted) gets another try,
        so every waiting call has its buttons."""
        for pending in await self.ctx.store.pending_approvals():
            if pending.call.card_ts is not None:
                continue
            session = pending.session
            thread = Thread(session.team_id, session.channel_id, session.thread_ts)
            batch = await self.ctx.store.batch_calls(session.id)
            row = pending.call
            if row.expires_at is None:
                ttl = self.ctx.policy.ttl_for(call_decision(self.ctx, row))
                expires_at = self.ctx.clock() + ttl
                await self.ctx.store.set_expiry(row.id, expires_at)
                row = row.model_copy(update={"expires_at": expires_at})
                self.ctx.deadline_set()
            await self.post(thread, row, batch, adopt=True)

    async def redraw_batch(self, session_id: str) -> None:
        """Redraw every posted card of the session's latest batch (after a restart: a decision
        may have been recorded without its card being redrawn)."""
        for row in await self.ctx.store.batch_calls(session_id):
            if row.needs_approval:
                await self.refresh(row)

    async def redraw_stale(self) -> int:
        """Redraw every card that shows another state than its call's (see `card_state`): a
        crash between recording a decision or a cancel and the redraw leaves live buttons."""
        stale = await self.ctx.store.stale_cards()
        for row in stale:
            await self.refresh(row)
        return len(stale)

    async def thread(self, row: ToolCallRow) -> Thread | None:
        return await thread_of(self.ctx, row)


def _ref(row: ToolCallRow) -> CardRef | None:
    if not (row.card_channel and row.card_ts):
        return None
    return CardRef(row.card_channel, row.card_ts)


def _card_status(status: str) -> Literal["approved", "rejected", "expired", "cancelled"]:
    match status:
        case "rejected" | "expired" | "cancelled":
            return status
        case _:
            return "approved"
