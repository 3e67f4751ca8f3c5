"""A person's Home tab is published once per burst of changes they see, with the latest view:
people who opened their tab (published at once) each decide one of the calls waiting, all at
once; every decision changes every tab, yet each tab is published once more, showing nothing
left to decide. Through the app and the stand-in that enforces Slack's tiers."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from bot.policy import Policy
from tests.scenarios.test_app import make_tools
from tests.support.harness import running_bot
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits
from tests.support.storms import Storm, home_policy, home_tabs, people, problems

PEOPLE = 6


async def test_each_tab_is_published_once_after_a_burst_of_decisions(tmp_path: Path) -> None:
    async with (
        SlackAPIStandIn(rate_limits=RateLimits(speed=15.0)) as slack,
        running_bot(
            tmp_path,
            tools=make_tools(tmp_path),
            slack=slack,
            policy=Policy.from_toml(home_policy(PEOPLE)),
        ) as bot,
    ):
        storm = Storm(bot)
        check = await home_tabs(storm, PEOPLE, timeout=60)
        await bot.settle(timeout=120)
        assert check() + problems(storm) == []
        published = [c for c in slack.calls_to("views.publish") if c.ok]
        per_person = Counter(str(c.params["user_id"]) for c in published)
        # Once when opened, once for the burst of decisions.
        assert per_person == {user: 2 for user in people(PEOPLE)}, per_person
        for user in people(PEOPLE):
            [*_, last] = [c for c in published if c.params["user_id"] == user]
            assert "opsgate_approve" not in json.dumps(last.params["view"])
