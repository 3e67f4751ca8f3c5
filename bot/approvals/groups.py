"""Slack user-group members, looked up through an injected callable and cached.

The approvals rules (`bot.approvals.rules`) ask `GroupResolver.is_member`; a failed lookup is
never cached and never allows anyone (see `docs/architecture.md`, "Approval semantics").
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta

__all__ = ["FetchMembers", "GroupResolver"]

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
