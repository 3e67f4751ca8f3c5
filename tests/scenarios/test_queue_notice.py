"""Merged "queued" notices: a burst of mentions in one channel at its concurrency
gets one notice in the channel, redrawn as the queue moves, instead of one post per queued
thread against the channel's one post a second; through the stand-in that enforces Slack's
tiers (at `SPEED`), nothing is refused for long, dropped, or told to anyone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.policy import Policy
from tests.support.harness import Bot, HeldReplies, running_bot
from tests.support.slack_api import SlackAPIStandIn, SlackCall
from tests.support.slack_ratelimits import RateLimits

BURST = 10
CHANNEL = "C0BURST"
SPEED = 15.0
"""Bucket seconds per second, on both sides (as in `test_storms`)."""


def queued_posts(bot: Bot) -> list[SlackCall]:
    return [
        c
        for c in bot.slack.calls_to("chat.postMessage")
        if c.ok and str(c.params.get("text")).startswith(":hourglass")
    ]


def drawn(bot: Bot, post: SlackCall) -> str:
    message = bot.slack.message(CHANNEL, str(post.response["ts"]))
    assert message is not None
    return str(message["text"])


async def test_a_burst_in_one_channel_gets_one_queued_notice_redrawn_as_it_moves(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml("[defaults]\nconcurrency = 1\n")
    limits = RateLimits(speed=SPEED)
    async with (
        SlackAPIStandIn(rate_limits=limits) as slack,
        running_bot(tmp_path, policy=policy, slack=slack) as bot,
    ):
        held = HeldReplies(lambda text: f"Looked into: {text}")
        held.queue(bot.llm, BURST)
        roots = await asyncio.gather(
            *(bot.mention(f"alert {n}", channel=CHANNEL) for n in range(BURST))
        )
        await held.wait_arrived(1)
        await bot.settle(runs=False)
        [post] = queued_posts(bot)
        assert post.params.get("thread_ts") in (None, "")  # in the channel, for everyone
        assert f"{BURST - 1} requests are waiting" in drawn(bot, post)
        await held.release_in_steps(BURST, 1, timeout=60)
        await bot.settle(timeout=60)
        assert queued_posts(bot) == [post]  # one notice for the whole burst
        assert "queue of this channel is empty" in drawn(bot, post)
        redraws = [
            c for c in slack.calls_to("chat.update") if c.params.get("ts") == post.response["ts"]
        ]
        assert 1 <= len([c for c in redraws if c.ok]) <= BURST
        for n, root in enumerate(roots):
            thread = [str(m["text"]) for m in slack.messages if m.get("thread_ts") == root]
            assert any(f"Looked into: alert {n}" in t for t in thread), n
            assert not any("Queued" in t for t in thread), n  # no notice per thread
        told = [str(c.params.get("text")) for c in slack.calls_to("chat.postMessage")]
        assert not any("ratelimited" in t or "slow down" in t for t in told)
        assert bot.service.ctx.output.outbox.dropped == {}  # type: ignore[attr-defined]
