"""The contract of the learned context windows: remembered in the database, so a
restart and every replica know what a provider's refusal taught one of them."""

from __future__ import annotations

import asyncio

import pytest

from bot.store import Store

from .conftest import StoreFactory


async def test_a_context_window_is_unknown_until_remembered(store: Store) -> None:
    assert await store.context_window("gpt-test") is None
    await store.remember_context_window("gpt-test", 128_000)
    assert await store.context_window("gpt-test") == 128_000
    assert await store.context_window("other-model") is None


async def test_the_last_writer_wins(store: Store) -> None:
    await store.remember_context_window("gpt-test", 128_000)
    await store.remember_context_window("gpt-test", 32_768)
    assert await store.context_window("gpt-test") == 32_768


async def test_another_store_and_a_restart_see_it(new_store: StoreFactory) -> None:
    async with new_store() as first, new_store() as second:
        await asyncio.gather(
            first.remember_context_window("a", 8_192), second.remember_context_window("b", 4_096)
        )
        assert await second.context_window("a") == 8_192
        assert await first.context_window("b") == 4_096
    async with new_store() as restarted:
        assert await restarted.context_window("a") == 8_192


async def test_a_window_of_no_tokens_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="'gpt-test'"):
        await store.remember_context_window("gpt-test", 0)
    assert await store.context_window("gpt-test") is None
