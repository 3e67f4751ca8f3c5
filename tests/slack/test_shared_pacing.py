"""Replicas pace through one Slack budget in their database (`SlackBudgets`): pacers on
one database (as three replicas) never spend more of a channel's posts than Slack gives, one
alone spends all of it, a 429 one of them hears holds the others, and a row waiting for the
budget keeps its claim. Over real stores (an SQLite file, PostgreSQL) and the stand-in
enforcing Slack's limits, both run faster (`SPEED`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.runs.output import Thread
from bot.runs.timeline import Task
from bot.slack.app import CountingWebClient
from bot.slack.outbox import NOTICE, SlackOutbox
from bot.slack.pacing import MARGIN, PAID_SECONDS, POST_MESSAGE_PER_CHANNEL, START_SKEW, Pacer
from bot.slack.timeline import STORM_GRACE, SlackTimeline
from bot.store import BudgetShape, BudgetState, OutboxEntry, SQLiteStore, Store
from tests.support.harness import paced_client
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures the postgresql stores use

SPEED = 10.0
"""Slack's minute passes in 6 s, on both sides."""
POSTS = 24

Stores = Callable[[], Store]


@pytest.fixture(params=["postgresql", "sqlite"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Stores:
    """Opens stores on one database, as replicas (or processes) sharing it would."""
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "opsgate.db")
    from bot.store import PostgresStore

    url: str = request.getfixturevalue("postgres_url")
    return lambda: PostgresStore(url)


@pytest.fixture
async def slack() -> AsyncIterator[SlackAPIStandIn]:
    async with SlackAPIStandIn(rate_limits=RateLimits(speed=SPEED)) as standin:
        yield standin


def paced(slack: SlackAPIStandIn, pacer: Pacer) -> CountingWebClient:
    return paced_client(slack, pacer)


@contextlib.asynccontextmanager
async def replicas(stores: Stores, n: int) -> AsyncIterator[list[Store]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(stores()) for _ in range(n)]


def floor(posts: int) -> float:
    """Clock seconds one channel's `posts` take at the pacer's rate (`START_SKEW` kept back)."""
    tier = POST_MESSAGE_PER_CHANNEL
    rate = tier.per_minute * MARGIN / 60
    return (posts - (tier.burst - START_SKEW * rate)) / rate / SPEED


async def test_three_replicas_together_never_exceed_a_channel(
    stores: Stores, slack: SlackAPIStandIn
) -> None:
    async with replicas(stores, 3) as three:
        clients = [paced(slack, Pacer(speed=SPEED, shared=store)) for store in three]
        started = time.monotonic()
        await asyncio.gather(
            *(clients[n % 3].chat_postMessage(channel="C1", text=f"m{n}") for n in range(POSTS))
        )
        elapsed = time.monotonic() - started
    assert slack.rate_limits is not None
    assert slack.rate_limits.refused["chat.postMessage"] == 0  # never over Slack's limit
    assert len(slack.messages) == POSTS
    assert elapsed < 1.5 * floor(POSTS)  # and the channel's whole budget spent


async def test_one_replica_alone_spends_the_whole_budget(
    stores: Stores, slack: SlackAPIStandIn
) -> None:
    async with replicas(stores, 3) as three:
        busy = paced(slack, Pacer(speed=SPEED, shared=three[0]))
        for idle in three[1:]:  # the others posted there once, a while ago
            await paced(slack, Pacer(speed=SPEED, shared=idle)).chat_postMessage(
                channel="C1", text="earlier"
            )
        await asyncio.sleep(3 / SPEED)  # Slack's 3 s: the bucket is full again
        started = time.monotonic()
        await asyncio.gather(
            *(busy.chat_postMessage(channel="C1", text=f"m{n}") for n in range(POSTS))
        )
        elapsed = time.monotonic() - started
    assert slack.rate_limits is not None
    assert slack.rate_limits.refused["chat.postMessage"] == 0
    # A third of the budget would take three times the floor.
    assert floor(POSTS) * 0.8 < elapsed < 1.5 * floor(POSTS)


class _Told:
    """A store whose takes and pauses are heard (the test waits for them to be shared)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.took = asyncio.Event()
        self.paused = asyncio.Event()

    async def take_budget(self, bucket: str, shape: BudgetShape, now: float) -> BudgetState:
        state = await self.store.take_budget(bucket, shape, now)
        self.took.set()
        return state

    async def pause_budget(
        self, bucket: str, shape: BudgetShape, now: float, until: float
    ) -> BudgetState:
        state = await self.store.pause_budget(bucket, shape, now, until)
        self.paused.set()
        return state

    async def read_budget(self, bucket: str, shape: BudgetShape) -> BudgetState | None:
        return await self.store.read_budget(bucket, shape)

    async def take_budget_within(
        self, bucket: str, shape: BudgetShape, now: float, within: float
    ) -> BudgetState | None:
        return await self.store.take_budget_within(bucket, shape, now, within)


async def test_a_429_one_replica_hears_holds_the_others(
    stores: Stores, slack: SlackAPIStandIn
) -> None:
    async with replicas(stores, 2) as (one, two):
        told = _Told(one)
        hears = paced(slack, Pacer(speed=SPEED, shared=told))
        other = paced(slack, Pacer(speed=SPEED, shared=two))
        slack.fail_next("chat.update", status=429, retry_after=1, times=1)
        first = asyncio.create_task(hears.chat_update(channel="C1", ts="1.0", text="a"))
        await asyncio.wait_for(told.paused.wait(), 5)
        started = time.monotonic()
        await asyncio.gather(
            other.chat_update(channel="C1", ts="1.0", text="b"), return_exceptions=True
        )
        waited = time.monotonic() - started
        await asyncio.gather(first, return_exceptions=True)
    assert waited > 0.7  # Retry-After: 1 s, on the replica that did not hear it
    assert slack.rate_limits is not None
    assert slack.rate_limits.refused["chat.update"] == 0  # the stand-in's own: none


async def test_a_row_waiting_for_the_budget_keeps_its_claim(
    stores: Stores, slack: SlackAPIStandIn
) -> None:
    async with replicas(stores, 2) as (mine, other):
        told = _Told(mine)
        pacer = Pacer(shared=told)
        lease = timedelta(seconds=0.3)
        outbox = SlackOutbox(mine, paced(slack, pacer), claimer="me", lease=lease, poll=0.05)
        post = {"channel": "C1", "thread_ts": "1700000000.000100", "text": "once"}
        # Another replica heard a 429: the channel's posts wait 1.5 s, past five leases.
        shape = BudgetShape(1.0, 3.0, 2.0)
        now = time.time()
        await other.pause_budget("chat.postMessage:C1", shape, now, now + 1.5)
        await outbox.put([OutboxEntry("chat.postMessage", post, NOTICE, channel_id="C1")])
        sender = asyncio.create_task(outbox.run())
        taken = []
        try:
            await asyncio.wait_for(told.took.wait(), 5)  # claimed, its call waiting its turn
            while not slack.calls_to("chat.postMessage"):
                taken += await other.claim_outbox("other", limit=10, lease=lease)
                await asyncio.sleep(0.05)  # polling another replica's claims: no event
            await asyncio.wait_for(outbox.wait_idle(), 5)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
    assert taken == []  # the row stayed claimed while its call waited for the budget
    assert [m["text"] for m in slack.messages] == ["once"]
    assert time.time() - now > 1.4


async def test_a_claim_from_the_mirror_sees_every_replica_s_spending(stores: Stores) -> None:
    async with replicas(stores, 2) as (one, two):
        mine, theirs = Pacer(shared=one), Pacer(shared=two)
        assert mine.claim("chat.startStream", 1.0)  # free; then the other spends the rest
        await mine.take("chat.startStream")
        for _ in range(4):
            await theirs.take("chat.startStream")
        read = asyncio.Event()
        reading = mine._read

        async def heard(*args: object) -> None:
            await reading(*args)  # type: ignore[arg-type]
            read.set()

        mine._read = heard  # type: ignore[method-assign]
        mine.short("chat.startStream")  # asks: the mirror is read again in the background
        await asyncio.wait_for(read.wait(), 5)
        assert not mine.claim("chat.startStream", 1.0)  # Tier 2: the next slot is 3 s away


async def test_replicas_racing_for_stream_slots_take_only_what_the_shared_bucket_holds(
    stores: Stores,
) -> None:
    """Each replica's mirror says the burst is free; the shared bucket gives it once."""
    async with replicas(stores, 3) as three:
        pacers = [Pacer(shared=store) for store in three]
        claims = await asyncio.gather(
            *(pacer.claim_in_time("chat.startStream", 1.0) for pacer in pacers * 3)
        )
        # Slack's burst of 5, the last a quarter second on (`START_SKEW` kept back); then 3 s
        # apart, past the second asked for.
        assert sum(claims) == 5
        for pacer, claimed in zip(pacers * 3, claims, strict=True):
            if claimed:  # a claimed slot is spent without taking another
                await asyncio.wait_for(pacer.take("chat.startStream"), 0.5)
        shape = pacers[0]._bucket("chat.startStream", None).shape()  # type: ignore[union-attr]
        state = await three[0].read_budget("chat.startStream", shape)
        assert state is not None and state.tokens < 0.1
        assert not await pacers[0].claim_in_time("chat.startStream", 1.0)


async def test_a_bucket_never_spent_here_is_read_fresh_before_it_is_judged(
    stores: Stores,
) -> None:
    """The other replica posted the channel's burst; this one never posted there: its memory
    says a full burst until `fresh` reads the shared bucket."""
    async with replicas(stores, 2) as (one, two):
        mine, theirs = Pacer(shared=one), Pacer(shared=two)
        for _ in range(3):
            await theirs.take("chat.postMessage", "C1")
        await mine.fresh("chat.postMessage", "C1")
        assert mine.busy("chat.postMessage", "C1")


async def test_a_timeline_is_not_started_where_another_replica_spent_the_streams(
    stores: Stores, slack: SlackAPIStandIn
) -> None:
    """The other replica started the storm's streams; this one, whose memory of the bucket
    is full, holds a short run's timeline rather than waiting seconds to start a stream."""
    async with replicas(stores, 2) as (one, two):
        mine, theirs = Pacer(speed=SPEED, shared=one), Pacer(speed=SPEED, shared=two)
        for _ in range(5):
            await theirs.take("chat.startStream")
        now = [1000.0]
        line = SlackTimeline(
            paced(slack, mine),
            Thread("T1", "C1", "1700000000.000100"),
            recipient_user_id="U0ALICE",
            clock=lambda: now[0],
        )
        await line.show(Task("call_1", "run_command", '{"command": "uptime"}', "in_progress"))
        await line.flush()
        await line.show(Task("call_1", "run_command", '{"command": "uptime"}', "complete"))
        now[0] += STORM_GRACE / 2
        await line.close()
    assert not slack.calls_to("chat.startStream")
    assert slack.rate_limits is not None
    assert slack.rate_limits.refused["chat.startStream"] == 0


async def test_a_slot_taken_ahead_and_not_spent_in_time_is_dropped(stores: Stores) -> None:
    """A 👀 whose outbox row another replica sent (or its removal cancelled) leaves its token
    unspent here: past `PAID_SECONDS` the next call takes its own, not one counted long ago."""
    now = [0.0]
    async with replicas(stores, 1) as (store,):
        pacer = Pacer(shared=store, clock=lambda: now[0])
        assert await pacer.claim_in_time("reactions.add", 1.0)
        shape = pacer._bucket("reactions.add", None).shape()  # type: ignore[union-attr]
        taken = await store.read_budget("reactions.add", shape)
        now[0] += PAID_SECONDS + 0.5
        await asyncio.wait_for(pacer.take("reactions.add"), 5)
        after = await store.read_budget("reactions.add", shape)
        assert taken is not None and after is not None
        assert after.at > taken.at  # the take went to the shared bucket
        assert not pacer._bucket("reactions.add", None).paid  # type: ignore[union-attr]


async def test_a_claim_the_bucket_cannot_give_asks_the_database_once(stores: Stores) -> None:
    """A storm's runs each ask for a 👀: once a refusal has shown the bucket spent, the
    others are refused from the mirror, not one after another under the bucket's row lock."""
    async with replicas(stores, 2) as (one, two):
        asked = _Told(one)
        calls = 0
        take_within = asked.take_budget_within

        async def counted(*args: Any) -> BudgetState | None:
            nonlocal calls
            calls += 1
            return await take_within(*args)

        asked.take_budget_within = counted  # type: ignore[method-assign]
        mine, theirs = Pacer(shared=asked), Pacer(shared=two)
        for _ in range(10):  # the other replica spent Tier 3's burst
            await theirs.take("reactions.add")
        claims = [await mine.claim_in_time("reactions.add", 1.0) for _ in range(20)]
    assert not any(claims)
    assert calls == 1
