"""The contract of the audit log and of event dedupe."""

from __future__ import annotations

from datetime import timedelta

from bot.store import Store

from .helpers import T0, Clock


async def test_audit_rows_since(store: Store, clock: Clock) -> None:
    await store.audit("old", actor=None)
    clock.advance(hours=3)
    await store.audit("new", actor="U1", call_id="call_1")
    assert [r.event for r in await store.audit_rows()] == ["old", "new"]
    recent = await store.audit_rows(since=T0 + timedelta(hours=1))
    assert [(r.event, r.at, r.call_id) for r in recent] == [
        ("new", T0 + timedelta(hours=3), "call_1")
    ]


# -- Slack retries --------------------------------------------------------------------------------


async def test_first_sighting_deduplicates_and_forgets_after_a_day(
    store: Store, clock: Clock
) -> None:
    assert await store.first_sighting("Ev1")
    assert not await store.first_sighting("Ev1")
    assert await store.first_sighting("Ev2")
    clock.advance(hours=23)
    assert not await store.first_sighting("Ev1")
    clock.advance(hours=2)
    assert await store.first_sighting("Ev1")


# -- readiness ------------------------------------------------------------------------------------


async def test_probe_write_writes_one_row_again_and_again(store: Store, clock: Clock) -> None:
    for _ in range(3):
        await store.probe_write()
        clock.advance(seconds=10)
    # The probe row is not a Slack event: real ids are still new, and it is one row.
    assert await store.first_sighting("Ev1")
    assert not await store.first_sighting("opsgate:readiness-probe")
