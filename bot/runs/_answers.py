"""What a person may decide now (`/opsgate pending`) and what a channel's policy is (help)."""

from __future__ import annotations

from .._duration import format_duration
from ._cards import Cards
from ._context import RunContext
from ._gate_audit import call_decision
from .cards import ChannelHelp, PendingEntry

__all__ = ["Answers"]


class Answers:
    def __init__(self, ctx: RunContext, cards: Cards) -> None:
        self.ctx = ctx
        self.cards = cards

    async def pending(self, user: str, *, channel: str, team: str | None) -> list[PendingEntry]:
        """Where the policy lets anyone in a channel approve, only `channel` (where the person
        asked) is listed: channel membership is not checked here, so other channels' requests
        are not shown to people who may not be in them."""
        policy = self.ctx.policy
        now = self.ctx.clock()
        entries: list[PendingEntry] = []
        for pending in await self.ctx.store.pending_approvals():
            row, where = pending.call, pending.session.channel_id
            decision = call_decision(self.ctx, row)
            if policy.approvers_for(where, decision).anyone and where != channel:
                continue
            if user in row.approvals or (row.expires_at is not None and row.expires_at <= now):
                continue
            verdict = await self.ctx.approvals.check(
                "approve",
                channel=where,
                user=user,
                requester=row.requested_by,
                user_team=team,
                home_team=pending.session.team_id,
                decision=decision,
            )
            if verdict.kind == "refused":
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
