"""Feedback votes on both databases: one vote per person per answer, the latest counts, and
each vote or change of mind audited once, also when two stores take one person's clicks."""

from __future__ import annotations

import asyncio

from bot.store import Store
from tests.support.store_helpers import votes

from .conftest import StoreFactory


async def _session(store: Store) -> str:
    return (await store.get_or_create_session("T1", "C1", "1700000000.000100")).id


async def _feedback_rows(store: Store) -> list[dict[str, object]]:
    return [
        {"actor": r.actor, **r.details} for r in await store.audit_rows() if r.event == "feedback"
    ]


async def test_five_clicks_of_one_person_are_one_vote(store: Store) -> None:
    session = await _session(store)
    outcomes = [await store.vote(session, "1.5", user="U1", value="good") for _ in range(5)]
    assert [o.counted for o in outcomes] == [True, False, False, False, False]
    assert await votes(store, session, "1.5") == {"U1": "good"}
    assert await _feedback_rows(store) == [{"actor": "U1", "value": "good", "message_ts": "1.5"}]


async def test_a_change_of_mind_counts_the_latest_only(store: Store) -> None:
    session = await _session(store)
    await store.vote(session, "1.5", user="U1", value="good")
    changed = await store.vote(session, "1.5", user="U1", value="bad")
    assert changed.counted and changed.replaces == "good"
    assert await votes(store, session, "1.5") == {"U1": "bad"}
    assert (await _feedback_rows(store))[-1] == {
        "actor": "U1",
        "value": "bad",
        "message_ts": "1.5",
        "replaces": "good",
    }


async def test_two_people_are_two_votes_and_answers_are_apart(store: Store) -> None:
    session = await _session(store)
    await store.vote(session, "1.5", user="U1", value="good")
    await store.vote(session, "1.5", user="U2", value="bad")
    await store.vote(session, "2.5", user="U1", value="bad")
    assert await votes(store, session, "1.5") == {"U1": "good", "U2": "bad"}
    assert await votes(store, session, "2.5") == {"U1": "bad"}


async def test_one_persons_clicks_on_two_stores_at_once_are_one_vote(
    new_store: StoreFactory,
) -> None:
    async with new_store() as first, new_store() as second:
        session = await _session(first)
        outcomes = await asyncio.wait_for(
            asyncio.gather(
                *(
                    (first if n % 2 else second).vote(session, "1.5", user="U1", value="good")
                    for n in range(6)
                )
            ),
            60,
        )
        assert sum(o.counted for o in outcomes) == 1
        assert len(await _feedback_rows(first)) == 1
