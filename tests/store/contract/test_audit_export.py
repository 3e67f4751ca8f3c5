"""The audit export's cursor and lease (`bot/observability/audit_export.py` stands on them),
and the span ids a paused run leaves on its calls, on both databases."""

from __future__ import annotations

from datetime import timedelta

from bot.store import Store

from .conftest import StoreFactory
from .helpers import Clock, paused_session

LEASE = timedelta(seconds=30)


async def test_one_holder_exports_at_a_time_and_the_cursor_only_moves_forward(
    new_store: StoreFactory, clock: Clock
) -> None:
    async with new_store() as a, new_store() as b:
        assert await a.claim_audit_export("A", LEASE) == 0
        assert await b.claim_audit_export("B", LEASE) is None  # A's lease runs
        assert await a.audit_exported("A", 5)
        assert not await a.audit_exported("A", 3)  # never backwards
        assert not await b.audit_exported("B", 9)  # not the holder
        assert await a.claim_audit_export("A", LEASE) == 5  # renewed
        clock.advance(seconds=31)
        assert await b.claim_audit_export("B", LEASE) == 5  # A's lease lapsed
        assert not await a.audit_exported("A", 6)
        await b.release_audit_export("B")
        assert await a.claim_audit_export("A", LEASE) == 5  # released: at once


async def test_a_paused_runs_span_ids_are_kept_on_its_calls(store: Store) -> None:
    session_id, _ = await paused_session(store)
    await store.note_trace(session_id, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    rows = await store.batch_calls(session_id)
    assert {(r.trace_id, r.span_id) for r in rows} == {
        ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    }
