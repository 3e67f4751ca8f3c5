"""Slack budgets shared through the database: stores on one database (as replicas) never take
more of a bucket together than it gives, and one alone may take all of it."""

from __future__ import annotations

import asyncio

import pytest

from bot.store import BudgetShape, Store

from .conftest import StoreFactory

SHAPE = BudgetShape(rate=1.0, burst=3.0, start=2.0)
"""One token a second, bursts of 3, a new bucket with one of its burst kept back."""
NOW = 1_000_000.0


async def _waits(takes: list[tuple[Store, str]], now: float) -> list[float]:
    states = await asyncio.gather(*(s.take_budget(bucket, SHAPE, now) for s, bucket in takes))
    return sorted(round(state.wait(now), 6) for state in states)


async def test_stores_on_one_database_never_take_a_token_twice(new_store: StoreFactory) -> None:
    async with new_store() as one, new_store() as two:
        waits = await _waits([(one, "chat.postMessage:C1"), (two, "chat.postMessage:C1")] * 10, NOW)
        # Two at once (the start), then one a second, each token taken by exactly one taker.
        assert waits == [0.0, 0.0, *(float(n) for n in range(1, 19))]


async def test_buckets_are_independent(new_store: StoreFactory) -> None:
    async with new_store() as one, new_store() as two:
        waits = await _waits([(one, "chat.postMessage:C1"), (two, "chat.postMessage:C2")] * 2, NOW)
        assert waits == [0.0, 0.0, 0.0, 0.0]


async def test_one_store_alone_may_spend_the_whole_bucket(new_store: StoreFactory) -> None:
    async with new_store() as one, new_store() as idle:
        await idle.take_budget("chat.update", SHAPE, NOW)  # the other spent one, long ago
        later = NOW + 60
        waits = await _waits([(one, "chat.update")] * 4, later)
        assert waits == [0.0, 0.0, 0.0, 1.0]  # the whole burst, then the rate


async def test_stores_racing_for_a_slot_in_time_take_only_what_fits(
    new_store: StoreFactory,
) -> None:
    async with new_store() as one, new_store() as two:
        takes = [one, two] * 5
        states = await asyncio.gather(
            *(s.take_budget_within("chat.startStream", SHAPE, NOW, 1.0) for s in takes)
        )
        taken = sorted(state.wait(NOW) for state in states if state is not None)
        assert taken == [0.0, 0.0, pytest.approx(1.0)]  # the two at the start, one a second on
        # The refused took nothing: the next token is still a second after the last one taken.
        assert await one.take_budget_within("chat.startStream", SHAPE, NOW, 1.5) is None
        state = await two.take_budget_within("chat.startStream", SHAPE, NOW, 2.0)
        assert state is not None and state.wait(NOW) == pytest.approx(2.0)


async def test_a_pause_holds_the_bucket_for_every_store(new_store: StoreFactory) -> None:
    async with new_store() as one, new_store() as two:
        await one.take_budget("chat.startStream", SHAPE, NOW)
        paused = await one.pause_budget("chat.startStream", SHAPE, NOW, NOW + 5)
        assert paused.tokens <= 0 and paused.paused_until == NOW + 5
        state = await two.take_budget("chat.startStream", SHAPE, NOW + 1)
        assert state.wait(NOW + 1) == pytest.approx(4.0)
        # After the pause it refills from empty, at the rate.
        state = await two.take_budget("chat.startStream", SHAPE, NOW + 7)
        assert state.wait(NOW + 7) == 0.0


async def test_a_clock_behind_counts_from_the_later_one(new_store: StoreFactory) -> None:
    async with new_store() as one, new_store() as two:
        await one.take_budget("chat.update", SHAPE, NOW + 10)
        behind = await two.take_budget("chat.update", SHAPE, NOW + 9.5)
        assert behind.at == NOW + 10  # not refilled backwards
        assert behind.tokens == pytest.approx(0.0)


async def test_only_postgresql_budgets_are_shared(store: Store) -> None:
    assert store.budgets_shared == (store._db.dialect == "postgresql")
