"""PagerDuty on-call schedules, mapped to Slack users with `users.lookupByEmail` (scope
`users:read.email`), for `[oncall.<name>] pagerduty_schedule` (`bot.approvals.pagerduty`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import httpx
from slack_sdk.web.async_client import AsyncWebClient

from ..approvals.pagerduty import PagerDutyOncall
from ..policy import Policy
from ..settings import Settings
from ..tasks import TaskSupervisor

__all__ = ["start_pagerduty"]


async def start_pagerduty(
    settings: Settings,
    policy: Policy,
    client: AsyncWebClient,
    tasks: TaskSupervisor,
    clock: Callable[[], datetime],
) -> PagerDutyOncall | None:
    """With schedules in the policy: fetch each once, hand the policy the answers, and keep
    them fresh in the background. Without a token every schedule's on-call is nobody."""
    schedules = policy.pagerduty_schedules
    if not schedules:
        return None
    token = settings.pagerduty_token.get_secret_value() if settings.pagerduty_token else ""
    http = httpx.AsyncClient()

    async def lookup(email: str) -> str | None:
        response = await client.users_lookupByEmail(email=email)
        user = response.get("user") or {}
        return str(user["id"]) if user.get("id") else None

    paging = PagerDutyOncall(
        http, token=token, base_url=settings.pagerduty_api_url, lookup_email=lookup, clock=clock
    )
    policy.page_with(paging.known, paging.why_nobody)
    for schedule in schedules:
        await paging.refresh(schedule)

    async def run() -> None:
        try:
            await paging.run(schedules)
        finally:
            await http.aclose()

    tasks.spawn(run(), name="pagerduty on-call", service=True)
    return paging
