"""The contract of delegations: one per delegator, replaced by a new one, ended by `off` or by
its time passing, and a lapsed one ended (and audited) once by any number of stores."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.store import Store

from .conftest import StoreFactory
from .helpers import Clock, mention


async def test_delegate_replace_and_end(store: Store, clock: Clock) -> None:
    until = clock.now + timedelta(hours=2)
    await store.delegate("U0ONE", "U0TWO", until, "on leave")
    await store.delegate("U0ONE", "U0THREE", until, None)  # replaces the first
    [held] = await store.delegations(clock.now)
    assert (held.delegator, held.delegate, held.until) == ("U0ONE", "U0THREE", until)
    assert await store.end_delegation("U0ONE")
    assert not await store.end_delegation("U0ONE")
    assert await store.delegations(clock.now) == []
    rows = [r for r in await store.audit_rows() if r.event.startswith("delegat")]
    assert [(r.event, r.actor, r.details["delegate"]) for r in rows] == [
        ("delegated", "U0ONE", "U0TWO"),
        ("delegated", "U0ONE", "U0THREE"),
        ("delegation_ended", "U0ONE", "U0THREE"),
    ]


async def test_a_lapsed_delegation_ends_once(new_store: StoreFactory, clock: Clock) -> None:
    async with new_store(person=mention) as one, new_store(person=mention) as two:
        await one.delegate("U0ONE", "U0TWO", clock.now + timedelta(minutes=5), None)
        assert await one.end_lapsed_delegations(clock.now) == 0
        clock.advance(minutes=5)
        assert await two.delegations(clock.now) == []
        ended = await asyncio.gather(
            one.end_lapsed_delegations(clock.now), two.end_lapsed_delegations(clock.now)
        )
        assert sorted(ended) == [0, 1]
        rows = [r for r in await one.audit_rows() if r.event == "delegation_ended"]
        assert [(r.actor, r.details["why"]) for r in rows] == [(None, "expired")]
