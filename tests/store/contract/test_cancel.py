"""The contract of cancelling a paused run: one winner against the resume, a closed batch."""

from __future__ import annotations

import asyncio

from agent_core import Cancelled, NotRun, Rejected, render_outcome
from bot.store import BatchMovedOn, NotWaiting, Store

from .conftest import StoreFactory
from .helpers import DROP, RESTART, STATUS, mention, paused_session


async def test_a_cancel_closes_the_batch_with_each_calls_outcome(store: Store) -> None:
    session_id, rows = await paused_session(store)
    await store.decide(rows[2].id, "rejected", user_id="UBOB", reason="not now")
    outcome = await store.cancel_batch(session_id, user_id="UALICE", via="button", rule="ops")
    assert outcome.cancelled and outcome.why is None
    assert [(r.call_id, r.status) for r in outcome.rows] == [
        (RESTART.id, "cancelled"),
        (STATUS.id, "cancelled"),
        (DROP.id, "rejected"),
    ]
    assert outcome.rows[0].reason == "cancelled by <@UALICE>"  # named by the store's person
    history = await store.load_messages(session_id)
    assert [(m.tool_call_id, m.content) for m in history[-3:]] == [
        (RESTART.id, render_outcome(Cancelled(by=mention("UALICE")))),
        (STATUS.id, render_outcome(NotRun(cancelled_by=mention("UALICE")))),
        (DROP.id, render_outcome(Rejected("not now", by=mention("UBOB")))),
    ]
    session = await store.get_session(session_id)
    assert session is not None and session.state == "idle"
    cancels = [r for r in await store.audit_rows() if r.event == "cancel"]
    assert [(r.call_id, r.details["via"]) for r in cancels] == [
        (RESTART.id, "button"),
        (STATUS.id, "button"),
    ]
    again = await store.cancel_batch(session_id, user_id="UALICE")
    assert not again.cancelled and again.why == NotWaiting("idle")
    assert len(await store.load_messages(session_id)) == len(history)


async def test_a_card_of_an_earlier_batch_cannot_cancel_a_later_one(store: Store) -> None:
    session_id, _ = await paused_session(store)
    outcome = await store.cancel_batch(session_id, user_id="UALICE", batch_id="older")
    assert not outcome.cancelled and outcome.why == BatchMovedOn()
    assert {r.status for r in await store.batch_calls(session_id)} == {"pending"}
    assert [r.event for r in await store.audit_rows()][-1] == "refusal"


async def test_cancel_and_resume_claim_race_has_exactly_one_winner(
    new_store: StoreFactory,
) -> None:
    """Two stores on one database: a cancel and the last decision's resume claim, at once."""
    for round_ in range(6):
        async with new_store() as one, new_store() as two:
            session_id, rows = await paused_session(one, thread=f"1700000000.{round_:06d}")
            for row in rows:
                if row.needs_approval:
                    await one.decide(row.id, "approved", user_id="U0BOB")
            cancel, claim = await asyncio.gather(
                one.cancel_batch(session_id, user_id="U0ALICE"), two.claim_resume(session_id)
            )
            assert cancel.cancelled != claim, (cancel, claim)
            history = await one.load_messages(session_id)
            answered = [m.tool_call_id for m in history if m.role == "tool"]
            if cancel.cancelled:
                assert answered == [r.call_id for r in rows]
                assert all(r.status == "cancelled" for r in cancel.rows)
            else:
                assert answered == []  # the resume owns the batch; the cancel touched nothing
                assert all(r.status == "approved" for r in cancel.rows if r.needs_approval)
