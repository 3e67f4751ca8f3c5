"""Change freezes and break-glass as the people act on them: `/opsgate freeze` and `unfreeze`
(freeze admins only), "Break glass" on a card a freeze blocks (break-glass approvers only, a
reason required), and "Mark reviewed" (an approver other than the breaker).

Break glass counts as an approval: it is recorded as one (`Store.break_glass`: the approval as
`decide` makes it, with the reason, the `break_glass` row and audit, and the card's redraw, in
one transaction), so N-of-M, the ledger and the resume work as for Approve; it also posts a loud
notice at the channel's top level, and leaves a review item that the decided card keeps ("Mark
reviewed") and the Home tab lists.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..store import GlassUse, Ruling, already_reason
from ..words import format_duration, parse_duration
from .cards import Cards
from .context import RunContext, thread_of
from .decisions import Previews
from .freezes import RedrawPending, active_freezes, freeze_for, freeze_info, tick
from .gate import audit_refusal, on_call, quorums, refusal_notice
from .metrics import note_decision
from .notices import BreakGlassUsed, DecisionNotRecorded, FreezeAnswer, Notice, UnknownRequest
from .output import Thread
from .views import FreezeInfo, GlassInfo

__all__ = ["FreezeDesk"]

_LONGEST_AD_HOC = 7 * 86_400
"""An ad hoc freeze lasts at most a week (longer belongs in the policy file)."""


class FreezeDesk:
    def __init__(
        self, ctx: RunContext, cards: Cards, resume: Callable[[str], Awaitable[bool]]
    ) -> None:
        self.ctx = ctx
        self.cards = cards
        self.maybe_resume = resume

    async def tick(self) -> int:
        """Announce freeze starts and ends once, and redraw the cards they cover."""
        return await tick(self.ctx, RedrawPending(self.ctx, self.cards.refresh))

    async def freezes_now(self, channel: str | None = None) -> tuple[FreezeInfo, ...]:
        found = await active_freezes(self.ctx)
        return tuple(freeze_info(f) for f in found if channel is None or f.covers(channel, None))

    async def unreviewed(self) -> tuple[GlassInfo, ...]:
        rows = await self.ctx.store.unreviewed_break_glass()
        return tuple(
            GlassInfo(r.ledger_id, r.channel_id, r.broken_by, r.reason, r.freeze_key, r.broken_at)
            for r in rows
        )

    # -- /opsgate freeze, /opsgate unfreeze ------------------------------------------------

    async def _is_admin(self, user: str) -> bool:
        return await self.ctx.approvals.listed(self.ctx.policy.defaults.freeze_admins, user)

    async def freeze(self, channel: str, *, user: str, text: str) -> FreezeAnswer:
        """`/opsgate freeze <duration> <reason>`: freeze `channel` from now."""
        if not await self._is_admin(user):
            return FreezeAnswer(
                "Only the freeze admins (defaults.freeze_admins in the policy) may start or "
                "end a change freeze. Nothing was frozen."
            )
        length, _, reason = text.strip().partition(" ")
        try:
            duration = parse_duration(length)
        except ValueError as exc:
            return FreezeAnswer(f"Usage: /opsgate freeze <duration> <reason>. {exc}")
        if not reason.strip() or duration.total_seconds() <= 0:
            return FreezeAnswer("Usage: /opsgate freeze <duration> <reason> (a reason is needed).")
        if duration.total_seconds() > _LONGEST_AD_HOC:
            return FreezeAnswer(
                "An ad hoc freeze lasts at most 7d; put longer ones in [[freezes]]."
            )
        row = await self.ctx.store.start_freeze(
            channel_id=channel,
            started_by=user,
            reason=reason.strip(),
            ends_at=self.ctx.clock() + duration,
        )
        await self.tick()  # announced (and audited) now, not at the timer's next look
        return FreezeAnswer(
            f"This channel is frozen for {format_duration(duration)} (until "
            f"{row.ends_at.isoformat()}): gated calls get no Approve until then."
        )

    async def unfreeze(self, channel: str, *, user: str) -> FreezeAnswer:
        """`/opsgate unfreeze`: end the channel's ad hoc freezes now."""
        if not await self._is_admin(user):
            return FreezeAnswer(
                "Only the freeze admins (defaults.freeze_admins in the policy) may start or "
                "end a change freeze. Nothing was changed."
            )
        ended = await self.ctx.store.end_freezes(channel_id=channel, ended_by=user)
        if not ended:
            return FreezeAnswer("No ad hoc freeze is in force here (the policy's cannot be ended).")
        await self.tick()
        return FreezeAnswer(f"Ended {len(ended)} ad hoc freeze(s) in this channel.")

    # -- break glass, mark reviewed ----------------------------------------------------------

    async def check_break_glass(
        self, ledger_id: str, *, user: str, team: str | None
    ) -> Notice | None:
        """Before the reason form opens: None if `user` may break glass on the call now."""
        on = await on_call(self.ctx, ledger_id)
        if on is None:
            return UnknownRequest()
        verdict = await on.authorize(self.ctx, "break_glass", user=user, team=team)
        return refusal_notice(verdict, on.row, on.decision) if verdict.kind == "refused" else None

    async def break_glass(
        self, ledger_id: str, *, user: str, team: str | None, reason: str, digest: str | None
    ) -> Notice | None:
        """Approve a frozen call by breaking glass (see the module docstring)."""
        store = self.ctx.store
        on = await on_call(self.ctx, ledger_id)
        if on is None:
            return UnknownRequest()
        row, session, decision = on.row, on.session, on.decision
        channel = session.channel_id
        verdict = await on.authorize(self.ctx, "break_glass", user=user, team=team)
        freeze = await freeze_for(self.ctx, channel, row.tool)
        if verdict.kind == "refused" or freeze is None or not reason.strip():
            await audit_refusal(
                self.ctx,
                on,
                user=user,
                team=team,
                reason=verdict.reason if verdict.kind == "refused" else "no reason",
                rule=verdict.rule,
                decision="break_glass",
            )
            if verdict.kind == "refused":
                return refusal_notice(verdict, row, decision)
            return FreezeAnswer("Breaking glass needs a reason.")
        # A previewed call is bound to its preview here as on Approve (stale: run again).
        stale = await Previews(self.ctx, self.cards).before_approval(
            row, decision, channel, user, rule=verdict.rule
        )
        if stale is not None:
            return stale
        use = GlassUse(
            channel,
            user,
            reason.strip(),
            freeze.key,
            {"tool": row.tool, "policy_rule": decision.policy_rule, "rule": verdict.rule},
        )
        # The approval, the break-glass row, the card's redraw and the loud notice (when the
        # output keeps an outbox) commit together.
        link = await self.cards.link(row)
        loud = BreakGlassUsed(row.tool, user, reason.strip(), freeze.label, link.permalink)
        top = Thread(session.team_id, channel, "")
        owed = self.ctx.output.owed(top, loud)
        outcome = await store.break_glass(
            ledger_id,
            use,
            team_id=team,
            # Several requirements: breaking glass takes the strictest quorum of them.
            ruling=Ruling(
                rule=verdict.rule,
                policy_rule=decision.policy_rule,
                policy_match=decision.rule_label,
                required_approvals=max(
                    (q.needed for q in quorums(self.ctx, channel, decision)),
                    default=self.ctx.policy.required_approvals_for(channel, decision),
                ),
            ),
            digest=digest,
            notices=owed,
        )
        if outcome.recorded:
            if not owed:
                await self.ctx.output.say(top, loud)
            if outcome.row.status == "approved":
                note_decision(self.ctx, outcome.row, "approved")
        else:
            await self.cards.refresh(outcome.row)
        await self.maybe_resume(row.session_id)
        if not outcome.recorded:
            return DecisionNotRecorded(outcome.why or already_reason(outcome.row))
        return None

    async def review(self, ledger_id: str, *, user: str, team: str | None) -> Notice | None:
        """ "Mark reviewed": an approver other than the breaker closes the review item."""
        store = self.ctx.store
        on = await on_call(self.ctx, ledger_id)
        if on is None:
            return UnknownRequest()
        row = on.row
        verdict = await on.authorize(self.ctx, "review", user=user, team=team, no_requester=True)
        if verdict.kind == "refused":
            await audit_refusal(
                self.ctx,
                on,
                user=user,
                team=team,
                reason=verdict.reason,
                rule=verdict.rule,
                decision="break_glass_reviewed",
            )
            if verdict.reason == "own_break_glass":
                return FreezeAnswer("You broke glass on this call, so someone else must review it.")
            return refusal_notice(verdict, row)
        reviewed = await store.review_break_glass(ledger_id, user_id=user)
        if reviewed is None:
            await self.cards.refresh(row)
            return FreezeAnswer("This break-glass use was reviewed already.")
        thread = await thread_of(self.ctx, row)
        if thread is not None:
            await self.ctx.output.say(
                thread, FreezeAnswer(f"Break-glass use on {row.tool} reviewed by {user}.")
            )
        return None
