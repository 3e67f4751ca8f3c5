"""PagerDuty on-call through a local stand-in of its REST API and the Slack stand-in's
`users.lookupByEmail`: an answer is kept at most 60 s; when PagerDuty is down the last known
on-call holds 15 minutes, then nobody is on call (fail closed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from slack_sdk.web.async_client import AsyncWebClient

from bot.pagerduty import PagerDutyOncall
from bot.policy import Policy, PolicyError
from tests.support.pagerduty import PagerDutyStandIn
from tests.support.slack_api import SlackAPIStandIn

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def test_cached_then_held_then_nobody() -> None:
    clock = Clock()
    async with PagerDutyStandIn() as pd, SlackAPIStandIn() as slack, httpx.AsyncClient() as http:
        slack.set_user("U0OLD", profile={"email": "old@example.com"})
        slack.set_user("U0NEW", profile={"email": "new@example.com"})
        client = AsyncWebClient(token="xoxb-test-token", base_url=slack.url)

        async def lookup(email: str) -> str | None:
            response = await client.users_lookupByEmail(email=email)
            return str(response["user"]["id"])

        paging = PagerDutyOncall(http, token=pd.token, base_url=pd.url, clock=clock)
        assert paging.known("PSCHED1") is None  # never asked: nobody
        pd.oncall["PSCHED1"] = "old@example.com"
        await paging.refresh("PSCHED1", lookup)
        assert paging.known("PSCHED1") == "U0OLD"
        assert pd.requests == [
            {"schedule_ids[]": "PSCHED1", "earliest": "true", "include[]": "users"}
        ]

        pd.oncall["PSCHED1"] = "new@example.com"
        clock.now += timedelta(seconds=59)
        await paging.refresh("PSCHED1", lookup)  # still fresh: not asked again
        assert len(pd.requests) == 1 and paging.known("PSCHED1") == "U0OLD"
        clock.now += timedelta(seconds=2)
        await paging.refresh("PSCHED1", lookup)
        assert paging.known("PSCHED1") == "U0NEW"

        pd.down = True
        clock.now += timedelta(minutes=5)
        await paging.refresh("PSCHED1", lookup)
        assert paging.known("PSCHED1") == "U0NEW"  # last known holds
        clock.now += timedelta(minutes=10, seconds=2)
        await paging.refresh("PSCHED1", lookup)
        assert paging.known("PSCHED1") is None  # 15 minutes without an answer: nobody
        policy = Policy.from_toml(
            '[defaults]\napprovers = ["oncall:primary"]\n'
            '[oncall.primary]\npagerduty_schedule = "PSCHED1"\n'
        )
        policy = policy.paged_by(paging)
        assert policy.approvers_for(None, now=clock.now).users == (
            "oncall:primary: nobody on call (PagerDuty unreachable since 09:06 UTC)",
        )
        pd.down = False
        await paging.refresh("PSCHED1", lookup)
        assert policy.approvers_for(None, now=clock.now).users == ("U0NEW",)


async def test_a_wrong_token_is_nobody() -> None:
    clock = Clock()
    async with PagerDutyStandIn() as pd, httpx.AsyncClient() as http:
        pd.oncall["PSCHED1"] = "old@example.com"

        async def lookup(email: str) -> str | None:
            return "U0OLD"

        paging = PagerDutyOncall(http, token="wrong", base_url=pd.url, clock=clock)
        await paging.refresh("PSCHED1", lookup)
        assert paging.known("PSCHED1") is None


def test_the_policy_resolves_a_schedule_through_what_pagerduty_said() -> None:
    policy = Policy.from_toml(
        '[defaults]\napprovers = ["oncall:primary"]\n'
        '[oncall.primary]\npagerduty_schedule = "PSCHED1"\n'
    )
    assert policy.pagerduty_schedules == ("PSCHED1",)
    nobody = "oncall:primary: nobody on call (PagerDuty is not set up)"
    assert policy.approvers_for(None).users == (nobody,)

    class Answered:
        def known(self, schedule: str) -> str | None:
            return {"PSCHED1": "U0NEW"}.get(schedule)

        def why_nobody(self, schedule: str) -> str:
            return "PagerDuty names no one Slack knows"

    paged = policy.paged_by(Answered())
    assert paged.approvers_for(None).users == ("U0NEW",)
    assert policy.approvers_for(None).users == (nobody,)  # a new policy; this one unchanged


def test_a_schedule_and_a_rotation_do_not_mix() -> None:
    text = '[oncall.primary]\npagerduty_schedule = "P1"\nrotation = ["U0ANNA"]\n'
    try:
        Policy.from_toml(text)
    except PolicyError as exc:
        assert "oncall.primary" in str(exc) and "pagerduty_schedule" in str(exc)
    else:
        raise AssertionError("a schedule with a rotation was accepted")
