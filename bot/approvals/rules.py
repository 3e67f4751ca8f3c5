"""Who may approve, reject, cancel or withdraw: every authorisation rule of OpsGate, in one place.

The rules (see `docs/architecture.md`, "Approval semantics"):

- The requester may always reject (withdraw) their own call, cancel their own paused run and
  withdraw their own queued message; they may approve their own call only when the policy's
  `allow_self_approval` says so.
- Otherwise the channel's approvers decide: listed users, members of listed user groups, or,
  with no list, anyone in the channel who belongs to the session's workspace (in a Slack
  Connect channel, people of another organisation must be listed by name). A policy rule with
  its own `approvers` replaces the channel's for the calls it decides (`decision`).
- Feedback on a run's answer: anyone whose workspace is known.
- A user group that cannot be looked up refuses (and says so): never allow on a failed lookup.

Group membership comes from an injected async callable (Slack: `usergroups.users.list`),
cached by `GroupResolver` (`bot.approvals.groups`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta

from ..policy import GateDecision, Policy
from .groups import FetchMembers, GroupResolver
from .verdicts import Action, Allowed, Refused, Verdict, Who

__all__ = ["Approvals"]

logger = logging.getLogger("opsgate.approvals")

_REQUESTER_RULES: dict[Action, str] = {
    "reject": "the requester may reject their own request",
    "cancel": "the requester may cancel their own run",
    "withdraw": "the requester may cancel their own run",
}


class Approvals:
    """Answers "may `user` do `action` here?" with a typed `Verdict`."""

    def __init__(
        self,
        policy: Policy,
        members: FetchMembers | GroupResolver | None = None,
        *,
        channel_members: FetchMembers | None = None,
    ) -> None:
        self.policy = policy
        if isinstance(members, GroupResolver):
            self.groups = members
        else:
            self.groups = GroupResolver(members or _no_groups)
        self.channels = GroupResolver(channel_members or _no_channels, ttl=CHANNEL_MEMBERS_TTL)
        """Channel members (Slack: `conversations.members`), for the places that list calls
        outside their channel (the Home tab) where "anyone in the channel" approves; forgotten
        on `member_joined_channel` / `member_left_channel`."""

    async def in_channel(self, channel: str, user: str) -> bool:
        """Is `user` a member of `channel`? A lookup that fails answers no (and is retried
        next time): a call is never shown outside its channel on a guess."""
        try:
            return await self.channels.is_member(channel, user)
        except Exception:
            logger.warning("could not list the members of channel %s", channel, exc_info=True)
            return False

    async def listed(self, ids: Iterable[str], user: str) -> bool:
        """Is `user` one of `ids` (user ids and user groups: admins of something)? A group
        that cannot be looked up does not count: never allow on a failed lookup."""
        for listed in ids:
            if listed == user:
                return True
            if not listed.startswith("S"):
                continue
            try:
                if await self.groups.is_member(listed, user):
                    return True
            except Exception:
                logger.warning("could not list the members of user group %s", listed, exc_info=True)
        return False

    async def check(
        self,
        action: Action,
        *,
        channel: str,
        user: str,
        requester: str | None,
        user_team: str | None = None,
        home_team: str | None = None,
        decision: GateDecision | None = None,
    ) -> Verdict:
        """May `user` take `action` on a request of `requester` in `channel`?

        `user_team` is the actor's workspace, `home_team` the session's. With `home_team`
        given, an unknown `user_team` is refused: a request that hides its workspace must not
        skip the Slack Connect rule. With no `home_team` (the terminal) nothing is checked.
        `decision`: the policy's verdict on the call, whose rule may name its own approvers.
        """
        if home_team is not None and not user_team:
            return Refused("unknown_workspace", action, "the actor's workspace is unknown")
        if action == "feedback":
            return Allowed("anyone may give feedback on an answer")
        if requester is not None and user == requester:
            if action in _REQUESTER_RULES:
                return Allowed(_REQUESTER_RULES[action])
            if not self.policy.allow_self_approval:
                return Refused("self_approval", action, "defaults.allow_self_approval = false")
        return await self._approver(
            action, channel, user, requester, user_team, home_team, decision
        )

    async def check_break_glass(
        self,
        *,
        channel: str,
        user: str,
        requester: str | None,
        user_team: str | None,
        home_team: str | None,
        decision: GateDecision,
    ) -> Verdict:
        """May `user` break glass on a call: listed in `defaults.break_glass_approvers` (or
        the deciding rule's `approvers`), never its requester; an empty list lets nobody."""
        if home_team is not None and not user_team:
            return Refused("unknown_workspace", "approve", "the actor's workspace is unknown")
        if requester is not None and user == requester and not self.policy.allow_self_approval:
            return Refused("self_approval", "approve", "defaults.allow_self_approval = false")
        spec = self.policy.break_glass_approvers(decision)
        if spec.anyone:
            return Refused("not_an_approver", "break_glass", f"{spec.source}: nobody is listed")
        swapped = GateDecision(True, decision.rule, approvers=(*spec.users, *spec.groups))
        verdict = await self._listed(
            "break_glass", channel, user, requester, user_team, home_team, swapped
        )
        if verdict.kind == "allowed":
            return Allowed(f"{spec.source}: {user} may break glass")
        return Refused(
            verdict.reason,
            "break_glass",
            f"{spec.source}: {user} may not break glass",
            verdict.who,
            verdict.unresolved_groups,
        )

    async def _approver(
        self,
        action: Action,
        channel: str,
        user: str,
        requester: str | None,
        user_team: str | None,
        home_team: str | None,
        decision: GateDecision | None,
    ) -> Verdict:
        """An approver under at least one of the call's requirements; `Allowed.counts` names
        every requirement whose approvers hold `user` (a person counts toward each set they
        belong to, and toward no other)."""
        needs = decision.needs() if decision is not None else ()
        if decision is None or len(needs) < 2:
            verdict = await self._listed(
                action, channel, user, requester, user_team, home_team, decision
            )
            if verdict.kind == "allowed" and needs:
                return replace(verdict, counts=(needs[0].key,))
            return verdict
        verdicts = [
            (
                need.key,
                await self._listed(
                    action, channel, user, requester, user_team, home_team, decision.under(need)
                ),
            )
            for need in needs
        ]
        allowed = [(key, v) for key, v in verdicts if v.kind == "allowed"]
        if allowed:
            rule = "; ".join(v.rule for _, v in allowed)
            return Allowed(rule, tuple(key for key, _ in allowed))
        refusals = [v for _, v in verdicts if v.kind == "refused"]
        if len(refusals) == 1:
            return refusals[0]
        unresolved = tuple(g for r in refusals for g in r.unresolved_groups)
        who = Who(
            tuple(dict.fromkeys(u for r in refusals for u in r.who.users)),
            tuple(dict.fromkeys(g for r in refusals for g in r.who.groups)),
            refusals[0].who.requester,
        )
        rule = "; ".join(r.rule for r in refusals)
        reason = "groups_unavailable" if unresolved else refusals[0].reason
        return Refused(reason, action, rule, who, unresolved)

    async def _listed(
        self,
        action: Action,
        channel: str,
        user: str,
        requester: str | None,
        user_team: str | None,
        home_team: str | None,
        decision: GateDecision | None,
    ) -> Verdict:
        spec = self.policy.approvers_for(channel, decision)
        who = Who(spec.users, spec.groups, requester if action in _REQUESTER_RULES else None)
        if spec.anyone:
            if user_team and home_team and user_team != home_team:
                rule = f"{spec.source} is empty: members of the session's workspace only"
                return Refused("other_workspace", action, rule, who)
            return Allowed(f"{spec.source} is empty: anyone in the channel")
        if user in spec.users:
            return Allowed(f"{spec.source}: {user} is listed")
        unresolved: list[str] = []
        for group in spec.groups:
            try:
                if await self.groups.is_member(group, user):
                    return Allowed(f"{spec.source}: member of {group}")
            except Exception:  # Slack down or a missing scope: refuse, and say so
                logger.warning("could not list the members of user group %s", group, exc_info=True)
                unresolved.append(group)
        rule = f"{spec.source}: {user} is not an approver"
        if unresolved:
            return Refused("groups_unavailable", action, rule, who, tuple(unresolved))
        return Refused("not_an_approver", action, rule, who)


async def _no_groups(group_id: str) -> Iterable[str]:
    raise LookupError(f"no way to look up the members of user group {group_id!r}")


async def _no_channels(channel_id: str) -> Iterable[str]:
    raise LookupError(f"no way to look up the members of channel {channel_id!r}")


CHANNEL_MEMBERS_TTL = timedelta(minutes=2)
"""How long a channel's member list is trusted between join/leave events (a missed event
shows a call to a person who just left for at most this long; a click is still checked)."""
