"""Who PagerDuty says is on call, for `[oncall.<name>] pagerduty_schedule` (`bot.policy._oncall`).

`GET {PAGERDUTY_API_URL}/oncalls?schedule_ids[]=<id>&earliest=true&include[]=users` (the token
from `PAGERDUTY_TOKEN`) gives the on-call user's email; Slack's `users.lookupByEmail` maps it
to a Slack user. An answer is trusted for at most `FRESH` (60 s): `refresh` runs in the
background more often than that, and the policy reads the last answer synchronously
(`known`): `PagerDutyOncall` is the policy's `Paging`, built before the policy's users and
given to the policy at its construction (`Policy.paged_by`, in `bot.wiring.open_deps`); the
server starts its refreshing once Slack's client is there to map emails (`start_pagerduty`).
When PagerDuty cannot be reached, the last known on-call holds for `HOLD` (15 minutes), then
nobody is on call through that schedule: fail closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

import httpx

from .policy import Policy
from .settings import Settings
from .tasks import TaskSupervisor

__all__ = [
    "FRESH",
    "HOLD",
    "LookupEmail",
    "PagerDutyOncall",
    "pagerduty_paging",
    "start_pagerduty",
]

logger = logging.getLogger("opsgate.approvals")

FRESH: Final = timedelta(seconds=60)
HOLD: Final = timedelta(minutes=15)
LookupEmail = Callable[[str], Awaitable[str | None]]
"""A Slack user id for an email (`users.lookupByEmail`); None when Slack knows nobody."""


@dataclass(frozen=True, slots=True)
class _Known:
    user: str | None
    at: datetime
    """When PagerDuty last answered for the schedule."""


class PagerDutyOncall:
    """The on-call of each PagerDuty schedule, kept fresh in the background."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        token: str,
        base_url: str,
        clock: Callable[[], datetime],
    ) -> None:
        self._http = http
        self._token = token
        self._base = base_url.rstrip("/")
        self._clock = clock
        self._known: dict[str, _Known] = {}
        self._failing: dict[str, datetime] = {}
        """Since when each schedule PagerDuty does not answer for has failed."""

    def known(self, schedule: str) -> str | None:
        """The on-call Slack user of `schedule` as last fetched; None once the last answer is
        older than `HOLD` (or there never was one)."""
        found = self._known.get(schedule)
        if found is None or self._clock() - found.at > HOLD:
            return None
        return found.user

    async def refresh(self, schedule: str, lookup_email: LookupEmail) -> None:
        """Ask PagerDuty (and Slack, through `lookup_email`) again unless the answer is younger
        than `FRESH`; a failure keeps the last answer (`known` drops it after `HOLD`)."""
        found = self._known.get(schedule)
        if found is not None and self._clock() - found.at < FRESH:
            return
        try:
            email = await self._oncall_email(schedule)
            user = await lookup_email(email) if email else None
        except Exception as exc:
            logger.warning("PagerDuty schedule %s: on-call unknown (%s)", schedule, exc)
            self._failing.setdefault(schedule, self._clock())
            return
        self._failing.pop(schedule, None)
        self._known[schedule] = _Known(user, self._clock())

    def why_nobody(self, schedule: str) -> str:
        """Why `known` names nobody for `schedule`, in the card's words."""
        since = self._failing.get(schedule)
        if since is not None:
            return f"PagerDuty unreachable since {since.astimezone(UTC):%H:%M} UTC"
        if schedule in self._known:
            return "PagerDuty names no one Slack knows"
        return "PagerDuty not reached yet"

    async def run(
        self, schedules: tuple[str, ...], lookup_email: LookupEmail, every: float = 20.0
    ) -> None:
        """Refresh every schedule each `every` seconds, until cancelled."""
        while True:
            for schedule in schedules:
                await self.refresh(schedule, lookup_email)
            await asyncio.sleep(every)

    async def _oncall_email(self, schedule: str) -> str | None:
        response = await self._http.get(
            f"{self._base}/oncalls",
            params={"schedule_ids[]": schedule, "earliest": "true", "include[]": "users"},
            headers={
                "Authorization": f"Token token={self._token}",
                "Accept": "application/vnd.pagerduty+json;version=2",
            },
            timeout=10,
        )
        response.raise_for_status()
        for entry in response.json().get("oncalls") or []:
            user = entry.get("user") or {}
            if isinstance(user.get("email"), str):
                return str(user["email"])
        return None


def pagerduty_paging(
    settings: Settings, policy: Policy, http: httpx.AsyncClient, clock: Callable[[], datetime]
) -> PagerDutyOncall | None:
    """The policy's paging when it names PagerDuty schedules (on `http`, which the caller
    closes), not yet asking anything. Without a token every schedule's on-call is nobody."""
    if not policy.pagerduty_schedules:
        return None
    token = settings.pagerduty_token.get_secret_value() if settings.pagerduty_token else ""
    return PagerDutyOncall(http, token=token, base_url=settings.pagerduty_api_url, clock=clock)


async def start_pagerduty(
    paging: PagerDutyOncall,
    schedules: tuple[str, ...],
    lookup_email: LookupEmail,
    tasks: TaskSupervisor,
) -> None:
    """Fetch each schedule once, then keep the answers fresh in the background."""
    for schedule in schedules:
        await paging.refresh(schedule, lookup_email)
    tasks.spawn(paging.run(schedules, lookup_email), name="pagerduty on-call", service=True)
