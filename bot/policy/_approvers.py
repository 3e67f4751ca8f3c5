"""Who may decide a held call: the approver lists of the policy, Slack user groups, and the
workspace rule for Slack Connect channels.

`check_approver` answers "may this person decide this call?" and says why not;
`GroupResolver` looks up Slack user-group members, with a cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._policy import Policy

__all__ = ["ApproverCheck", "ApproverSpec", "FetchMembers", "GroupResolver", "check_approver"]

logger = logging.getLogger("bot.policy")


@dataclass(frozen=True, slots=True)
class ApproverSpec:
    """Who may decide in one channel. Neither users nor groups means anyone in the channel."""

    users: tuple[str, ...]
    groups: tuple[str, ...]
    source: str
    """Where this list comes from: "defaults.approvers" or "channels_policy.<id>.approvers"."""

    @property
    def anyone(self) -> bool:
        return not self.users and not self.groups

    def mention_text(self) -> str:
        """Slack mrkdwn naming the approvers, e.g. "<@U1>, <@U2> or members of <!subteam^S1>"."""
        if self.anyone:
            return "anyone in the channel"
        names = [f"<@{u}>" for u in self.users]
        if self.groups:
            names.append("members of " + ", ".join(f"<!subteam^{g}>" for g in self.groups))
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


@dataclass(frozen=True, slots=True)
class ApproverCheck:
    """The answer of `check_approver`; `why` is the reply for a refused user (Slack mrkdwn)."""

    allowed: bool
    why: str | None
    rule: str


FetchMembers = Callable[[str], Awaitable[Sequence[str]]]


class GroupResolver:
    """Members of Slack user groups, fetched through `fetch` and cached for `ttl`.

    `fetch` is the bot's wrapper around `usergroups.users.list`; a failed fetch is not cached.
    `clock` returns seconds (monotonic); tests pass their own.
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


async def check_approver(
    policy: Policy,
    *,
    channel: str,
    user_id: str,
    requester: str | None,
    groups: GroupResolver,
    user_team: str | None = None,
    home_team: str | None = None,
) -> ApproverCheck:
    """May `user_id` approve a call that `requester` asked for in `channel`?

    `user_team` is the clicker's workspace, `home_team` the session's: with no approver list,
    "anyone in the channel" means anyone of that workspace, so in a Slack Connect channel
    people from another organisation must be named in the policy to decide.
    """
    if requester is not None and user_id == requester and not policy.allow_self_approval:
        return ApproverCheck(
            allowed=False,
            why=(
                "You asked for this, so you cannot approve it yourself: someone else has to. "
                "To allow it, set allow_self_approval = true in the policy file."
            ),
            rule="defaults.allow_self_approval = false",
        )
    spec = policy.approvers_for(channel)
    if spec.anyone and user_team and home_team and user_team != home_team:
        return ApproverCheck(
            False,
            "Only members of this workspace may decide here. To let people from another "
            "organisation approve, list them in the policy's approvers.",
            f"{spec.source} is empty: members of the session's workspace only",
        )
    if spec.anyone:
        return ApproverCheck(True, None, f"{spec.source} is empty: anyone in the channel")
    if user_id in spec.users:
        return ApproverCheck(True, None, f"{spec.source}: {user_id} is listed")
    unresolved: list[str] = []
    for group in spec.groups:
        try:
            if await groups.is_member(group, user_id):
                return ApproverCheck(True, None, f"{spec.source}: member of {group}")
        except Exception:  # Slack down or a missing scope: refuse, and say so
            logger.warning("could not list the members of user group %s", group, exc_info=True)
            unresolved.append(group)
    why = f"Only {spec.mention_text()} may approve this."
    if unresolved:
        failed = ", ".join(f"<!subteam^{g}>" for g in unresolved)
        why += f" (The members of {failed} could not be looked up just now; try again.)"
    return ApproverCheck(False, why, f"{spec.source}: {user_id} is not an approver")
