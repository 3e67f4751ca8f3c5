"""Who may approve, reject, cancel or withdraw: every authorisation rule of OpsGate, in one
place, answering with a typed `Verdict` (`Allowed` or `Refused`, never a message), and
`authorize`, the one path every entry point takes to them.

Front ends (Slack, the terminal) render a `Refused` to words; the run service audits `rule`
and acts on the kind.

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
looked up and cached by `GroupResolver`; a failed lookup is never cached.

Cards, the Home tab, modals, slash commands and messages all decide, edit, allow, cancel,
withdraw, revoke, show buttons and take feedback through `authorize`, so a rule (the
workspace, Slack Connect, approvers, groups, self-approval, the policy's verdict on the call,
the card lock) is applied the same way whichever surface the click came from
(docs/architecture.md, "One gate"). It is thin on purpose: the rules live in
`Approvals.check`; it adds only what every caller used to do for itself (the session's
workspace always given, the action mapped to its rule, the lock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Literal

from .policy import GateDecision, Policy

__all__ = [
    "Action",
    "Actor",
    "Allowed",
    "Approvals",
    "FetchMembers",
    "GateAction",
    "GatedCall",
    "GroupResolver",
    "RefusalReason",
    "Refused",
    "Verdict",
    "Who",
    "authorize",
]

Action = Literal["approve", "reject", "cancel", "withdraw", "feedback", "break_glass"]
"""What someone tried: decide a card (approve/reject), cancel a run, withdraw a queued message,
give feedback on an answer, break glass on a card a change freeze blocks."""

RefusalReason = Literal[
    "unknown_workspace",
    "self_approval",
    "other_workspace",
    "not_an_approver",
    "groups_unavailable",
    "card_locked",
    "frozen",
    "not_breakable",
    "own_break_glass",
]
"""Why not. `unknown_workspace`: the request did not say which workspace the person belongs to,
so the Slack Connect rule cannot be applied (refused, whatever else holds).
`groups_unavailable`: the person is not listed and a user group that might hold
them could not be looked up (try again later). `card_locked`: the call's arguments could not be
shown whole, or the policy forbids it, so nothing may approve it (`authorize`).
`frozen`: a change freeze is in force (`rule` names it and until when); `not_breakable`: no
"Break glass" here (no freeze, or neither the tool nor the rule sets `break_glass`);
`own_break_glass`: the breaker may not mark their own break-glass use reviewed."""


@dataclass(frozen=True, slots=True)
class Who:
    """Who may act where the refusal happened, for the front end to name them."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    requester: str | None = None
    """The requester, when the action is one the requester may always take (reject, cancel)."""

    @property
    def anyone(self) -> bool:
        return not self.users and not self.groups


@dataclass(frozen=True, slots=True)
class Allowed:
    """The action may go ahead; `rule` (for the audit log) says which rule allowed it."""

    rule: str
    counts: tuple[str, ...] = ()
    """An approval's requirements it counts toward (`Requirement.key`s: the rules that name
    this person), when the call has requirements; the store counts it toward those only."""
    kind: Literal["allowed"] = "allowed"


@dataclass(frozen=True, slots=True)
class Refused:
    """The action may not go ahead, and why, with what a front end needs to explain it."""

    reason: RefusalReason
    action: Action
    rule: str
    who: Who = Who()
    unresolved_groups: tuple[str, ...] = ()
    """User groups whose members could not be looked up (with `groups_unavailable`)."""
    kind: Literal["refused"] = "refused"


Verdict = Allowed | Refused


FetchMembers = Callable[[str], Awaitable[Iterable[str]]]
"""The members of one user group (by id); Slack: `usergroups.users.list`."""


class GroupResolver:
    """Members of Slack user groups, fetched through `fetch` and cached for `ttl`.

    A failed fetch is not cached. `clock` returns seconds (monotonic); tests pass their own.
    """

    def __init__(
        self,
        fetch: FetchMembers,
        *,
        ttl: timedelta = timedelta(minutes=5),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl = ttl.total_seconds()
        self._clock = clock
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}

    def _cached(self, group_id: str) -> frozenset[str] | None:
        hit = self._cache.get(group_id)
        if hit is not None and self._clock() - hit[0] < self._ttl:
            return hit[1]
        return None

    async def members(self, group_id: str) -> frozenset[str]:
        cached = self._cached(group_id)
        if cached is not None:
            return cached
        members = frozenset(await self._fetch(group_id))
        self._cache[group_id] = (self._clock(), members)
        return members

    async def is_member(self, group_id: str, user_id: str) -> bool:
        return user_id in await self.members(group_id)

    def forget(self, group_id: str | None = None) -> None:
        """Drop one group (or all) from the cache, e.g. on a `subteam_members_changed` event."""
        if group_id is None:
            self._cache.clear()
        else:
            self._cache.pop(group_id, None)


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


GateAction = Literal[
    "approve",
    "reject",
    "edit",
    "allow",
    "cancel",
    "withdraw",
    "revoke",
    "show",
    "feedback",
    "preview",
    "break_glass",
    "review",
]
"""What the person tries. `show`: be offered the call's buttons (the Home tab, `pending`);
`feedback`: rate a run's answer; `preview`: run a call's preview again ("Re-run preview");
`break_glass`: approve a call a freeze blocks (break-glass approvers only); `review`: mark
someone else's break-glass use reviewed (an approver)."""

_RULE: dict[GateAction, Action] = {
    "approve": "approve",
    "reject": "reject",
    "edit": "approve",  # an edit approves a new call
    "allow": "approve",  # an allowance approves this call and later ones
    "show": "approve",
    "revoke": "approve",  # anyone who may approve in the channel (or the granter)
    "cancel": "cancel",
    "withdraw": "withdraw",
    "feedback": "feedback",
    "preview": "approve",  # who may approve the call may refresh what they decide on
    "break_glass": "approve",
    "review": "approve",
}
_SHOWS_ARGUMENTS = frozenset({"approve", "edit", "allow", "show"})
"""Actions that approve what the person was shown: refused while it cannot be shown whole."""


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a user id and their workspace (None: the request did not say)."""

    user: str
    team: str | None


@dataclass(frozen=True, slots=True)
class GatedCall:
    """What the action is on: a call (or a run, or an allowance) in `channel`."""

    channel: str
    workspace: str | None
    """The session's workspace; None only where no workspace applies (the terminal)."""
    requester: str | None = None
    locked: str | None = None
    """Why the call cannot be approved from what was shown, if it cannot: its arguments could
    not be shown whole (`card_locked`), or the policy forbids it (`forbidden`)."""
    frozen: str | None = None
    """The change freeze in force for the call, in words (`freezes[0] until …`), if any."""
    broken_by: str | None = None
    """Who broke glass on the call (for `review`: not them)."""


async def authorize(
    approvals: Approvals,
    actor: Actor,
    call: GatedCall,
    action: GateAction,
    *,
    decision: GateDecision | None = None,
) -> Verdict:
    """`Allowed(rule)` or the typed `Refused`: the rules of `approvals`, then the lock.
    `decision`: the policy's verdict on the call (its rule may name its own approvers and
    quorum, or forbid it); None where no call is concerned (a run, an allowance)."""
    rule = _RULE[action]
    if action in ("break_glass", "review"):
        return await _glass(approvals, actor, call, action, decision)
    verdict = await approvals.check(
        rule,
        channel=call.channel,
        user=actor.user,
        requester=call.requester,
        user_team=actor.team,
        home_team=call.workspace,
        decision=decision,
    )
    if verdict.kind == "allowed" and action in _SHOWS_ARGUMENTS and call.locked is not None:
        if call.locked == "forbidden":
            why = "the policy forbids this call"
        else:
            why = f"the arguments could not be shown whole ({call.locked})"
        return Refused("card_locked", rule, why)
    if verdict.kind == "allowed" and action in _SHOWS_ARGUMENTS and call.frozen is not None:
        return Refused("frozen", rule, f"change freeze {call.frozen}")
    return verdict


async def _glass(
    approvals: Approvals,
    actor: Actor,
    call: GatedCall,
    action: GateAction,
    decision: GateDecision | None,
) -> Verdict:
    """Break glass: only on a frozen, breakable, unforbidden call, only by the break-glass
    approvers (never the requester). Review: an approver, never the breaker."""
    if call.workspace is not None and not actor.team:
        return Refused("unknown_workspace", "approve", "the actor's workspace is unknown")
    if action == "review":
        if call.broken_by is None:
            return Refused("not_breakable", "approve", "no break-glass use on this call")
        if actor.user == call.broken_by:
            return Refused("own_break_glass", "approve", "the breaker may not review it")
        return await approvals.check(
            "approve",
            channel=call.channel,
            user=actor.user,
            requester=None,
            user_team=actor.team,
            home_team=call.workspace,
            decision=decision,
        )
    if decision is None or decision.forbidden or not decision.break_glass:
        return Refused("not_breakable", "approve", "the policy sets no break_glass for this call")
    if call.frozen is None:
        return Refused("not_breakable", "approve", "no change freeze is in force")
    if call.locked is not None:
        return Refused("card_locked", "approve", f"the call is locked ({call.locked})")
    return await approvals.check_break_glass(
        channel=call.channel,
        user=actor.user,
        requester=call.requester,
        user_team=actor.team,
        home_team=call.workspace,
        decision=decision,
    )
