"""A paused run's timeline message, kept with the run on both databases: what one store (a
process before its restart) keeps, another reads; a later pause replaces it; the end drops it."""

from __future__ import annotations

from bot.store import StoredTimeline

from .conftest import StoreFactory


async def test_a_kept_timeline_is_read_by_another_store_and_dropped_at_the_end(
    new_store: StoreFactory,
) -> None:
    async with new_store() as first:
        session = (await first.get_or_create_session("T1", "C1", "1700000000.000100")).id
        assert await first.kept_timeline(session) is None
        await first.keep_timeline(session, "1700.1", '{"tasks": []}')
        await first.keep_timeline(session, "1700.1", '{"tasks": [1]}')  # a partial count, later
    async with new_store() as second:
        assert await second.kept_timeline(session) == StoredTimeline("1700.1", '{"tasks": [1]}')
        await second.drop_timeline(session)
        assert await second.kept_timeline(session) is None
        await second.drop_timeline(session)  # idempotent
