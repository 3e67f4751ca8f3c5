"""Storms through the stand-in that enforces Slack's tiers, at a reduced scale of
size and time (`SPEED`: Slack's minute in a few seconds, on both sides): the five storms of the
issue (`tests.support.storms`; `bench/storms.py` runs them at full scale), each ending with
every answer whole and once, every command output shown, no card keeping its buttons after its
decision, no 👀 left behind, nothing dropped, no 429 told to anyone and every ack within 3 s."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from bot.policy import Policy
from bot.slack.mrkdwn import user_mention
from bot.store import SQLiteStore
from tests.scenarios.test_app import BOB, make_tools
from tests.scenarios.test_cancel import drop_redraws
from tests.support.harness import Bot, running_bot
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits
from tests.support.storms import (
    Check,
    Storm,
    alerts_in_one_channel,
    alerts_over_channels,
    approvals_burst,
    home_policy,
    home_tabs,
    long_answers,
    problems,
)

SPEED = 15.0
"""Bucket seconds per second: Slack's minute passes in 4 s."""


@contextlib.asynccontextmanager
async def storm_bot(tmp_path: Path, policy: Policy | None = None) -> AsyncIterator[Bot]:
    limits = RateLimits(speed=SPEED)
    async with (
        SlackAPIStandIn(rate_limits=limits) as slack,
        running_bot(tmp_path, tools=make_tools(tmp_path), slack=slack, policy=policy) as bot,
    ):
        yield bot


async def _drained(storm: Storm, check: Check) -> list[str]:
    await storm.bot.settle(timeout=120)
    return check() + problems(storm)


async def test_alerts_over_channels_each_answered_once_whole(tmp_path: Path) -> None:
    async with storm_bot(tmp_path) as bot:
        storm = Storm(bot)
        assert await _drained(storm, await alerts_over_channels(storm, 12, channels=4)) == []


async def test_alerts_in_one_channel_each_approved_show_every_output(tmp_path: Path) -> None:
    async with storm_bot(tmp_path) as bot:
        storm = Storm(bot)
        assert await _drained(storm, await alerts_in_one_channel(storm, 8, timeout=60)) == []


async def test_a_burst_of_approvals_leaves_no_buttons_and_shows_every_output(
    tmp_path: Path,
) -> None:
    async with storm_bot(tmp_path) as bot:
        storm = Storm(bot)
        assert await _drained(storm, await approvals_burst(storm, 6, channels=3)) == []


async def test_long_answers_at_once_are_shown_whole(tmp_path: Path) -> None:
    async with storm_bot(tmp_path) as bot:
        storm = Storm(bot)
        assert await _drained(storm, await long_answers(storm, 3, chars=15_000)) == []


async def test_home_tabs_after_a_burst_of_decisions_show_nothing_left(tmp_path: Path) -> None:
    async with storm_bot(tmp_path, Policy.from_toml(home_policy(5))) as bot:
        storm = Storm(bot)
        assert await _drained(storm, await home_tabs(storm, 5, timeout=60)) == []


async def test_a_restart_redraws_only_the_cards_whose_call_moved_on(tmp_path: Path) -> None:
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        async with running_bot(tmp_path, tools=make_tools(tmp_path), llm=llm, slack=slack) as bot:
            for i in range(3):
                llm.reply_tool_calls([("call_1", "run_command", {"command": f"echo {i}"})])
                await bot.mention(f"job {i}", channel=f"C0KEEP{i}")
            cards = await bot.wait_cards(3)
        # Decided with no redraw owed (a release before the outbox owed them, then a crash):
        # stale. The store writes the redraw with the decision: taken out here.
        async with SQLiteStore(tmp_path / "opsgate.db", person=user_mention) as store:
            outcome = await store.decide(cards[0]["ledger_id"], "rejected", user_id=BOB)
            assert outcome.recorded
            await drop_redraws(store)
        before = len(slack.calls_to("chat.update"))
        llm.reply_text("Understood.")
        async with running_bot(tmp_path, tools=make_tools(tmp_path), llm=llm, slack=slack) as bot:
            await bot.settle()
        redraws = slack.calls_to("chat.update")[before:]
        assert len(redraws) == 1  # the two unchanged cards cost nothing
        assert "actions" not in str(redraws[0].params.get("blocks"))
