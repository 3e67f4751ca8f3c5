"""Pacing: the bot's Web API client takes turns at Slack's tiers, so a storm is spread
out instead of refused, waits out every 429 (`Retry-After`) until the call is applied, and still
fails fast on real errors. Against the stand-in enforcing the same tiers, run faster (`speed`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError

from bot.slack.app import CountingWebClient
from bot.slack.pacing import Pacer, RateLimited
from tests.support.harness import paced_client
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits

SPEED = 20.0
"""Slack's minute passes in 3 s, on both sides."""


@pytest.fixture
async def slack() -> AsyncIterator[SlackAPIStandIn]:
    async with SlackAPIStandIn(rate_limits=RateLimits(speed=SPEED)) as standin:
        yield standin


def paced(slack: SlackAPIStandIn, pacer: Pacer, errors: list[str]) -> CountingWebClient:
    return paced_client(slack, pacer, errors.append)


async def test_a_storm_of_updates_is_applied_whole_without_a_429(slack: SlackAPIStandIn) -> None:
    errors: list[str] = []
    client = paced(slack, Pacer(speed=SPEED), errors)
    posted = await client.chat_postMessage(channel="C1", text="card")
    started = time.monotonic()
    await asyncio.gather(
        *(client.chat_update(channel="C1", ts=posted["ts"], text=f"v{i}") for i in range(25))
    )
    elapsed = time.monotonic() - started
    assert slack.rate_limits is not None
    assert slack.rate_limits.refused["chat.update"] == 0
    assert len([c for c in slack.calls_to("chat.update") if c.ok]) == 25
    assert errors == []
    # 10 at once, then 50 a minute: 15 more take 18 bucket seconds (0.9 s at SPEED).
    assert 0.7 < elapsed < 5


async def test_posts_are_paced_per_channel(slack: SlackAPIStandIn) -> None:
    client = paced(slack, Pacer(speed=SPEED), [])
    await asyncio.gather(
        *(client.chat_postMessage(channel=f"C{i % 4}", text=f"m{i}") for i in range(24))
    )
    assert slack.rate_limits is not None
    assert slack.rate_limits.refused["chat.postMessage"] == 0
    assert len(slack.messages) == 24


async def test_a_429_is_waited_out_never_given_up(slack: SlackAPIStandIn) -> None:
    limited: list[str] = []
    errors: list[str] = []
    client = paced(slack, Pacer(speed=SPEED, on_ratelimited=limited.append), errors)
    slack.fail_next("chat.postMessage", status=429, retry_after=0, times=6)
    posted = await client.chat_postMessage(channel="C1", text="still arrives")
    assert posted["ok"]
    assert limited == ["chat.postMessage"] * 6
    assert errors == []  # a 429 waited out is not a failed call


async def test_past_the_deadline_the_caller_hears_it(slack: SlackAPIStandIn) -> None:
    errors: list[str] = []
    client = paced(slack, Pacer(deadline=0.5), errors)
    slack.fail_next("reactions.add", status=429, retry_after=1, times=3)
    with pytest.raises(RateLimited, match=r"'reactions\.add'"):
        await client.reactions_add(channel="C1", timestamp="1.0", name="eyes")
    assert errors == ["reactions.add"]


async def test_real_errors_fail_fast(slack: SlackAPIStandIn) -> None:
    client = paced(slack, Pacer(), [])
    slack.fail_next("chat.postMessage", error="channel_not_found")
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel="C9", text="nowhere")
    assert caught.value.response["error"] == "channel_not_found"
    assert len(slack.calls_to("chat.postMessage")) == 1


def test_a_replica_takes_its_share_of_the_budget() -> None:
    pacer = Pacer(share=0.5, clock=lambda: 0.0)
    for _ in range(4):  # chat.update: bursts of 10, halved, the last held back a moment
        assert not pacer.short("chat.update")
        pacer._bucket("chat.update", None).reserve(0.0)  # type: ignore[union-attr]
    assert pacer.short("chat.update")


def test_a_claim_takes_a_slot_only_when_it_is_free_within_the_wait() -> None:
    now = [0.0]
    pacer = Pacer(clock=lambda: now[0])
    # chat.startStream: Tier 2, bursts of 5 (the last `START_SKEW` on), then one every ~3.2 s.
    assert [pacer.claim("chat.startStream", 0.0) for _ in range(5)] == [True] * 4 + [False]
    assert pacer.claim("chat.startStream", 1.0)  # the burst's last, a quarter second on
    assert pacer.claim("chat.startStream", 4.0)  # the next slot, about 3.4 s on
    assert not pacer.claim("chat.startStream", 4.0)  # the one after is past 4 s
    assert pacer.claim("chat.postMessage", 1.0, channel="C1")  # other buckets are their own
    now[0] = 100.0
    assert pacer.claim("chat.startStream", 0.0)  # refilled


async def test_a_claimed_slot_is_spent_by_the_next_call_not_taken_twice() -> None:
    now = [0.0]
    pacer = Pacer(clock=lambda: now[0])
    assert pacer.claim("chat.startStream", 0.0)
    for _ in range(3):  # the claimed slot and the three others of the burst: no waiting
        await asyncio.wait_for(pacer.take("chat.startStream"), 0.5)
    await asyncio.wait_for(pacer.take("chat.startStream"), 0.5)
    assert pacer.short("chat.startStream")


def test_a_bucket_being_spent_is_busy_until_it_refills() -> None:
    now = [0.0]
    pacer = Pacer(clock=lambda: now[0])
    assert not pacer.busy("chat.postMessage", "C1")
    assert pacer.claim("chat.postMessage", 0.0, channel="C1")
    assert pacer.busy("chat.postMessage", "C1")
    assert not pacer.busy("chat.postMessage", "C2")  # each channel its own
    now[0] = 10.0
    assert not pacer.busy("chat.postMessage", "C1")


async def test_streams_are_busy_beyond_what_one_conversation_spends() -> None:
    """A resumed run's timeline and its answer take two streams within a second or so: the
    next answer is not held as if a storm were on (`beyond=1`); a third stream is a storm."""
    now = [0.0]
    pacer = Pacer(clock=lambda: now[0])
    assert not pacer.busy("chat.startStream", beyond=1)
    await asyncio.wait_for(pacer.take("chat.startStream"), 0.5)
    now[0] = 1.0
    await asyncio.wait_for(pacer.take("chat.startStream"), 0.5)
    assert not pacer.busy("chat.startStream", beyond=1)
    assert pacer.busy("chat.startStream")
    await asyncio.wait_for(pacer.take("chat.startStream"), 0.5)
    assert pacer.busy("chat.startStream", beyond=1)
