"""What a person sees of the bot: their Home tab (what they may decide now, what they wait for,
the allowances of their channels and the policy in a paragraph), `/opsgate pending` and
`/opsgate help`.

Where "anyone in the channel" approves, a call is listed outside its channel only to the
channel's members (`Approvals.in_channel`: Slack's `conversations.members`, cached briefly and
forgotten on join and leave events); a lookup that fails lists nothing. Channels with approver
lists show to the people on them.
"""

from __future__ import annotations

from dataclasses import replace

from ..approvals import Actor, GatedCall, authorize
from ..policy import GateDecision
from ..store import HomeViewer
from ..words import format_duration
from .cards import Cards
from .context import RunContext
from .edits import Allowances
from .freezes import active_freezes, freeze_info, freeze_summary
from .gate import OnCall, acting_for, authorize_on, call_decision
from .views import (
    AllowanceInfo,
    CardCall,
    ChannelHelp,
    FreezeInfo,
    GlassInfo,
    HomeView,
    PendingEntry,
)

__all__ = ["REPUBLISH_MAX", "Answers", "Home"]


REPUBLISH_MAX = 50
"""Most Home tabs republished after one decision (`views.publish` is rate limited)."""


class Home:
    def __init__(self, ctx: RunContext, cards: Cards, allowances: Allowances) -> None:
        self.ctx = ctx
        self.cards = cards
        self.allowances = allowances

    async def view(self, user: str, *, team: str | None) -> HomeView:
        store = self.ctx.store
        now = self.ctx.clock()
        to_decide: list[CardCall] = []
        waiting: list[CardCall] = []
        channels: set[str] = set()
        for pending in await store.pending_approvals():
            row, session = pending.call, pending.session
            where = session.channel_id
            if row.expires_at is not None and row.expires_at <= now:
                continue
            batch = await store.batch_calls(session.id)
            if row.requested_by == user:
                waiting.append(self.cards.card_call(row, batch, where))
                continue
            decision = call_decision(self.ctx, row)
            if user in row.approvals or not await self._may_see(where, user, decision):
                continue
            verdict = await authorize_on(
                self.ctx,
                "show",
                user=user,
                team=team,
                session=session,
                row=row,
                decision=decision,
            )
            if verdict.kind == "refused" and verdict.reason == "not_an_approver":
                # Someone this person stands in for (`/opsgate delegate`) may decide it.
                on = OnCall(row, session, decision)
                if (found := await acting_for(self.ctx, on, user, team, "show")) is not None:
                    verdict = found[1]
            # A locked call is listed still (it may be rejected); the Home tab draws it with no
            # Approve or Edit (`bot.slack.home`).
            if verdict.kind == "allowed" or verdict.reason == "card_locked":
                channels.add(where)
                to_decide.append(self.cards.card_call(row, batch, where))
        allowances = [a for a in await self.allowances.active() if await self._sees(a, user, team)]
        freezes, unreviewed = await self._freezes()
        return HomeView(
            user=user,
            to_decide=tuple(to_decide),
            waiting=tuple(waiting),
            allowances=tuple(allowances),
            policy=self.summary(),
            channels=tuple(sorted(channels)),
            freezes=freezes,
            unreviewed=unreviewed,
            delegations=tuple(
                d for d in await store.delegations(now) if user in (d.delegator, d.delegate)
            ),
        )

    async def _freezes(self) -> tuple[tuple[FreezeInfo, ...], tuple[GlassInfo, ...]]:
        """The change freezes in force and the break-glass uses nobody reviewed yet."""
        found = await active_freezes(self.ctx)
        rows = await self.ctx.store.unreviewed_break_glass()
        glass = tuple(
            GlassInfo(r.ledger_id, r.channel_id, r.broken_by, r.reason, r.freeze_key, r.broken_at)
            for r in rows
        )
        return tuple(freeze_info(f) for f in found), glass

    async def _sees(self, allowance: AllowanceInfo, user: str, team: str | None) -> bool:
        if allowance.granted_by == user:
            return True
        if not await self._may_see(allowance.channel, user):
            return False
        call = GatedCall(allowance.channel, workspace=None)
        verdict = await authorize(self.ctx.approvals, Actor(user, team), call, "revoke")
        return verdict.kind == "allowed"

    async def _may_see(self, channel: str, user: str, decision: GateDecision | None = None) -> bool:
        """Whether `channel`'s calls may be shown to `user` away from the channel: always
        where approvers are listed (the gate then decides), only to members where anyone in
        the channel approves."""
        if not self.ctx.policy.approvers_for(channel, decision).anyone:
            return True
        return await self.ctx.approvals.in_channel(channel, user)

    async def opened(self, user: str, *, team: str | None) -> HomeView:
        """`user` opened the Home tab: remember them (to republish it after decisions they
        see) and return what it shows."""
        await self.ctx.store.home_opened(user, team)
        return replace(await self.view(user, team=team), opened=True)

    async def affected(
        self,
        *,
        ledger_id: str | None = None,
        channel: str | None = None,
        viewers: list[HomeViewer] | None = None,
    ) -> list[HomeViewer]:
        """Who, of the people who opened the Home tab lately, sees a change to call `ledger_id`
        (or to the allowances of `channel`): its requester, and whoever may approve there. At
        most `REPUBLISH_MAX`, the most recent openers first. `viewers`: the store's recent
        openers, when the caller read them already."""
        if viewers is None:
            viewers = await self.ctx.store.home_viewers()
        if not viewers:
            return []  # nobody to republish for: spare the call and session reads
        requester, decision = None, None
        if ledger_id is not None:
            row = await self.ctx.store.get_call(ledger_id)
            session = None if row is None else await self.ctx.store.get_session(row.session_id)
            if row is None or session is None:
                return []
            requester, channel = row.requested_by, session.channel_id
            decision = call_decision(self.ctx, row)  # a rule's own approvers see its call
        if channel is None:
            return []
        out: list[HomeViewer] = []
        for viewer in viewers:
            if len(out) >= REPUBLISH_MAX:
                break
            if viewer.user_id == requester:
                out.append(viewer)
                continue
            if not await self._may_see(channel, viewer.user_id, decision):
                continue
            verdict = await authorize(
                self.ctx.approvals,
                Actor(viewer.user_id, viewer.team_id),
                GatedCall(channel, workspace=None),
                "show",
                decision=decision,
            )
            if verdict.kind == "allowed":
                out.append(viewer)
        return out

    def summary(self) -> str:
        """The policy in one paragraph (plain words; the renderer escapes it)."""
        policy = self.ctx.policy
        tools = sorted(self.ctx.tools.values(), key=lambda t: t.name)
        asks = [f"{t.name} {policy.approval_summary(t)}" for t in tools]
        allows = [
            f"{t.name} ({format_duration(w)})"
            for t in tools
            if (w := policy.tool_policy(t.name).allow_for) is not None
        ]
        anyone = policy.approvers_for(None).anyone
        who = "anyone in the channel but the requester" if anyone else "the listed approvers"
        text = (
            f"Tool calls: {'; '.join(asks) or 'none'}. "
            f"{policy.defaults.required_approvals} approval(s) needed by default, from "
            f"{who}; requests expire after "
            f"{format_duration(policy.ttl)}. "
        )
        text += (
            f"Allowances may be granted for: {', '.join(allows)}." if allows else "No allowances."
        )
        return text + freeze_summary(policy)


# -- answers -------------------------------------------------------------------------------------
# What a person may decide now (`/opsgate pending`) and what a channel's policy is (help).


class Answers:
    def __init__(self, ctx: RunContext, cards: Cards) -> None:
        self.ctx = ctx
        self.cards = cards

    async def pending(self, user: str, *, channel: str, team: str | None) -> list[PendingEntry]:
        """Where the policy lets anyone in a channel approve, other channels' calls are listed
        only to their members."""
        policy = self.ctx.policy
        now = self.ctx.clock()
        entries: list[PendingEntry] = []
        for pending in await self.ctx.store.pending_approvals():
            row, where = pending.call, pending.session.channel_id
            decision = call_decision(self.ctx, row)
            anyone = policy.approvers_for(where, decision).anyone
            if anyone and where != channel and not await self.ctx.approvals.in_channel(where, user):
                continue
            if user in row.approvals or (row.expires_at is not None and row.expires_at <= now):
                continue
            verdict = await authorize_on(
                self.ctx,
                "show",
                user=user,
                team=team,
                session=pending.session,
                row=row,
                decision=decision,
            )
            if verdict.kind == "refused" and verdict.reason != "card_locked":
                continue
            link = await self.cards.link(row)
            entries.append(
                PendingEntry(
                    tool=row.tool,
                    channel=where,
                    requested_by=row.requested_by,
                    permalink=link.permalink,
                    expires_at=row.expires_at,
                    approvals=len(row.approvals),
                    required_approvals=policy.required_approvals_for(where, decision),
                )
            )
        return entries

    def channel_help(self, channel: str) -> ChannelHelp:
        policy = self.ctx.policy
        tools = self.ctx.tools
        chosen = policy.offered_tools(channel, tools)
        offered = chosen if chosen is not None else tuple(tools.values())
        approvers = policy.approvers_for(channel)
        return ChannelHelp(
            channel=channel,
            acts_here=policy.allows_channel(channel),
            trigger=policy.trigger_for(channel),
            allowed_bots=policy.channel(channel).allowed_bots,
            approver_users=approvers.users,
            approver_groups=approvers.groups,
            required_approvals=policy.required_approvals_for(channel),
            allow_self_approval=policy.allow_self_approval,
            ttl=format_duration(policy.ttl),
            tools=tuple((t.name, policy.approval_summary(t)) for t in offered),
            concurrency=policy.concurrency_for(channel),
            has_instructions=policy.instructions_for(channel) is not None,
            policy_source=policy.source,
        )
