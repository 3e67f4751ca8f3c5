"""A change a card shows and the card's redraw commit together: a decision, an approval of N,
an edit, "Allow for", an expiry, a cancel, a break-glass use and its review, and a preview's run
each write one `CARD_REDRAW` intent for the call's card in their own transaction, and wake the
sender (the store's constructor argument) after the commit; a transaction cut off (a crash, a
cancelled task) leaves neither the change nor the intent."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from agent_core import ChatMessage, call_digest, canonical_arguments
from bot.settings import HOLD_ENV
from bot.store import (
    CARD_REDRAW,
    REDRAW_PRIORITY,
    AllowanceGrant,
    GlassUse,
    OutboxEntry,
    Ruling,
    Store,
    StoredPreview,
    ToolCallRow,
)

from .conftest import StoreFactory
from .helpers import RESTART, STATUS, T0, Clock, mention, paused_session

LEASE = timedelta(seconds=30)


class Wakes:
    """The sender's wake-up, as the store calls it (after each commit that owed a redraw)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


@pytest.fixture
def wakes() -> Wakes:
    return Wakes()


@pytest.fixture
async def store(new_store: StoreFactory, wakes: Wakes) -> AsyncIterator[Store]:
    """The store as the bot opens it, its sender's wake-up given to its constructor."""
    async with new_store(person=mention, wake=wakes) as opened:
        yield opened


async def carded(store: Store, thread: str = "1700000000.000100") -> tuple[str, list[ToolCallRow]]:
    """A paused session whose two gated calls have cards."""
    session_id, rows = await paused_session(store, thread=thread)
    gated = [r for r in rows if r.needs_approval]
    for n, row in enumerate(gated):
        await store.set_card(row.id, "C1", f"1700000001.00010{n}")
        await store.card_drawn(row.id, "pending:0")
    return session_id, gated


async def owed(store: Store) -> list[tuple[str, str | None, dict[str, object], int]]:
    """The outbox's rows, as (method, key, params, priority), taken out as a sender would."""
    rows = await store.claim_outbox("reader", limit=100, lease=LEASE)
    for row in rows:
        await store.outbox_sent(row.id)
    return sorted((r.method, r.key, r.params, r.priority) for r in rows)


def intent(ledger_id: str) -> tuple[str, str, dict[str, object], int]:
    return (CARD_REDRAW, f"card:{ledger_id}", {"ledger_id": ledger_id}, REDRAW_PRIORITY)


def grant() -> AllowanceGrant:
    exact = canonical_arguments({"service": "api", "force": True})
    return AllowanceGrant(
        channel_id="C1",
        tool="restart_service",
        shape=json.dumps({"kind": "exact", "arguments": exact}),
        label="these exact arguments",
        expires_at=T0 + timedelta(hours=1),
    )


async def test_a_decision_writes_its_cards_redraw_and_wakes_the_sender(
    store: Store, wakes: Wakes
) -> None:
    _, [first, second] = await carded(store)
    outcome = await store.decide(first.id, "approved", user_id="UBOB")
    assert outcome.recorded
    assert wakes.count == 1
    assert await owed(store) == [intent(first.id)]
    # Two approvals of two: each one changes the card (its progress), the newer unsent redraw
    # supersedes the older; a refused click (already decided) owes nothing.
    await store.decide(second.id, "approved", user_id="UBOB", ruling=Ruling(required_approvals=2))
    await store.decide(second.id, "approved", user_id="UCAROL", ruling=Ruling(required_approvals=2))
    assert not (await store.decide(first.id, "rejected", user_id="UCAROL")).recorded
    assert await owed(store) == [intent(second.id)]


async def test_a_calls_result_owes_its_cards_redraw_superseding_an_unsent_one(
    store: Store,
    wakes: Wakes,
) -> None:
    """The card says what happened once the call ran: the result and the redraw commit
    together. The decision's redraw still unsent then is superseded (one row, not two); one
    already sent is followed by the result's."""
    session_id, [first, _] = await carded(store)
    await store.decide(first.id, "approved", user_id="UBOB")
    await store.start_tool_call(session_id, RESTART)
    await store.start_tool_call(session_id, STATUS)  # the held sibling has no card
    answer = ChatMessage.tool("exit code: 0", RESTART.id)
    await store.finish_tool_call(session_id, RESTART, answer, is_error=False)
    await store.finish_tool_call(
        session_id, STATUS, ChatMessage.tool("up", STATUS.id), is_error=False
    )
    assert wakes.count == 2  # the decision and the carded call's result
    assert await owed(store) == [intent(first.id)]  # superseded, not doubled

    session_id, [again, _] = await carded(store, "1700000009.000100")
    await store.decide(again.id, "approved", user_id="UBOB")
    assert await owed(store) == [intent(again.id)]  # the decision's redraw was sent
    await store.start_tool_call(session_id, RESTART)
    await store.finish_tool_call(session_id, RESTART, answer, is_error=False)
    assert await owed(store) == [intent(again.id)]  # and the result owes another


async def test_edit_allow_expiry_and_cancel_owe_their_redraws(store: Store, clock: Clock) -> None:
    session_id, [first, second] = await carded(store)
    edited = {"service": "api", "force": False}
    arguments = canonical_arguments(edited)
    await store.edit_call(
        first.id, arguments, call_digest("restart_service", edited), user_id="UED"
    )
    assert await owed(store) == [intent(first.id)]
    allowed = await store.allow_call(second.id, grant(), user_id="UBOB", digest=second.digest)
    assert allowed.allowance is not None
    assert await owed(store) == [intent(second.id)]

    session_id, [late, kept] = await carded(store, "1700000009.000100")
    await store.set_expiry(late.id, T0 + timedelta(minutes=5))
    clock.advance(minutes=6)
    assert [r.id for r in await store.expire_due()] == [late.id]
    assert await owed(store) == [intent(late.id)]
    cancelled = await store.cancel_batch(session_id, user_id="UALICE", via="button")
    assert cancelled.cancelled
    assert await owed(store) == [intent(kept.id)]  # the expired call was not cancelled again


async def test_a_store_with_no_sender_to_wake_owes_the_redraw_all_the_same(
    new_store: StoreFactory,
) -> None:
    async with new_store(person=mention) as store:
        _, [first, _] = await carded(store)
        assert (await store.decide(first.id, "rejected", user_id="UBOB")).recorded
        assert await owed(store) == [intent(first.id)]
        assert [r.id for r in await store.stale_cards()] == [first.id]  # sent, not yet drawn


async def test_an_owed_redraw_is_the_outboxs_not_start_ups(store: Store) -> None:
    _, [first, _] = await carded(store)
    await store.decide(first.id, "rejected", user_id="UBOB")
    assert await store.stale_cards() == []  # the outbox sends it, drawn from the call
    [row] = await store.claim_outbox("sender", limit=10, lease=LEASE)
    await store.outbox_sent(row.id)
    assert [r.id for r in await store.stale_cards()] == [first.id]  # sent, not yet marked


async def test_a_transaction_cut_off_leaves_neither_decision_nor_redraw(
    store: Store, monkeypatch: pytest.MonkeyPatch, wakes: Wakes
) -> None:
    """ "Allow for" held at its fault point (the call approved and its redraw owed, in the
    transaction; the allowance not yet written), then cancelled: a rollback, as a crash."""
    _, [first, _] = await carded(store)
    held = asyncio.Event()
    monkeypatch.setenv(HOLD_ENV, "allow_decided")
    monkeypatch.setattr("sys.stderr", _Watch(held, "holding at allow_decided"))
    task = asyncio.create_task(
        store.allow_call(first.id, grant(), user_id="UBOB", digest=first.digest)
    )
    await asyncio.wait_for(held.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.delenv(HOLD_ENV)
    row = await store.get_call(first.id)
    assert row is not None and row.status == "pending" and row.approvals == ()
    assert (await store.outbox_stats()).depth == {}
    assert await store.active_allowances() == []
    assert wakes.count == 0
    # The same click again, not cut off: both commit.
    again = await store.allow_call(first.id, grant(), user_id="UBOB", digest=first.digest)
    assert again.allowance is not None and again.decision.row.status == "approved"
    assert await owed(store) == [intent(first.id)]
    assert wakes.count == 1


GLASS = GlassUse("C1", "UDAVE", "payments down", "adhoc:x", {"tool": "restart_service"})


def preview(output: str, digest: str) -> StoredPreview:
    return StoredPreview(
        argv=("cat", "app.yaml"),
        output=output,
        exit_status=0,
        failed=None,
        ran_at=T0,
        seconds=0.01,
        digest=digest,
    )


async def events(store: Store) -> list[str]:
    return [a.event for a in await store.audit_rows()]


LOUD = OutboxEntry(
    "chat.postMessage", {"channel": "C1", "thread_ts": "", "text": "glass broken"}, 2, "C1"
)
"""The loud notice a break-glass use owes, as the Slack output would give it."""


async def test_break_glass_its_decision_and_its_redraw_commit_together(
    store: Store, wakes: Wakes
) -> None:
    _, [first, second] = await carded(store)
    outcome = await store.break_glass(first.id, GLASS, digest=first.digest, notices=[LOUD])
    assert outcome.recorded and outcome.row.status == "approved"
    assert outcome.row.reason == "break glass: payments down"
    glass = await store.break_glass_of(first.id)
    assert glass is not None and glass.broken_by == "UDAVE" and glass.freeze_key == "adhoc:x"
    assert (await events(store)).count("break_glass") == 1
    loud = ("chat.postMessage", None, dict(LOUD.params), 2)
    assert await owed(store) == sorted([intent(first.id), loud]) and wakes.count == 1
    # Refused (decided already): no second use, no redraw owed by the store, no notice.
    again = await store.break_glass(first.id, GLASS, digest=first.digest, notices=[LOUD])
    assert not again.recorded
    assert (await events(store)).count("break_glass") == 1
    assert await owed(store) == []
    # Its review changes the card too ("Mark reviewed" goes): the redraw commits with it.
    assert await store.review_break_glass(first.id, user_id="UBOB") is not None
    assert await owed(store) == [intent(first.id)] and wakes.count == 3
    # One of two approvals: recorded, glass broken once; the other approver's is a decision.
    half = await store.break_glass(second.id, GLASS, ruling=Ruling(required_approvals=2))
    assert half.recorded and half.row.status == "pending"
    other = GlassUse("C1", "UERIN", "still down", "adhoc:x")
    done = await store.break_glass(second.id, other, ruling=Ruling(required_approvals=2))
    assert done.recorded and done.row.status == "approved"
    kept = await store.break_glass_of(second.id)
    assert kept is not None and kept.broken_by == "UDAVE"
    assert await owed(store) == [intent(second.id)]


async def test_break_glass_cut_off_leaves_no_decision_no_use_no_redraw(
    store: Store, monkeypatch: pytest.MonkeyPatch, wakes: Wakes
) -> None:
    """Held after its approval was written (the use not yet), then cancelled: a rollback, and
    neither the redraw nor the loud notice is owed."""
    _, [first, _] = await carded(store)
    await _cut_off(monkeypatch, "glass_decided", store.break_glass(first.id, GLASS, notices=[LOUD]))
    row = await store.get_call(first.id)
    assert row is not None and row.status == "pending" and row.approvals == ()
    assert await store.break_glass_of(first.id) is None
    assert "decision" not in await events(store) and "break_glass" not in await events(store)
    assert (await store.outbox_stats()).depth == {} and wakes.count == 0


async def test_a_previews_run_and_its_cards_redraw_commit_together(
    store: Store, monkeypatch: pytest.MonkeyPatch, wakes: Wakes
) -> None:
    _, [first, _] = await carded(store)
    await store.decide(first.id, "approved", user_id="UBOB", ruling=Ruling(required_approvals=2))
    await owed(store)
    await _cut_off(
        monkeypatch,
        "preview_stored",
        store.set_preview(first.id, preview("a", "aa"), why="rerun", reset_approvals=True),
    )
    row = await store.get_call(first.id)
    assert row is not None and row.preview_run() is None and row.approvals == ("UBOB",)
    assert (await store.outbox_stats()).depth == {} and wakes.count == 1
    updated = await store.set_preview(
        first.id, preview("a", "aa"), why="rerun", reset_approvals=True
    )
    assert updated is not None and updated.approvals == ()
    assert await owed(store) == [intent(first.id)] and wakes.count == 2
    # A call whose card is not posted yet (its first preview) owes no redraw; nor a decided one.
    _, rows = await paused_session(store, thread="1700000009.000100")
    fresh = next(r for r in rows if r.needs_approval)
    assert await store.set_preview(fresh.id, preview("b", "bb"), why="card") is not None
    await store.decide(first.id, "rejected", user_id="UCAROL")
    await owed(store)
    assert await store.set_preview(first.id, preview("c", "cc"), why="rerun") is None
    assert await owed(store) == []


async def _cut_off(monkeypatch: pytest.MonkeyPatch, point: str, change: Any) -> None:
    """Run `change` until it holds at fault point `point` (inside its transaction), then
    cancel it there, as a crash would cut it off."""
    held = asyncio.Event()
    monkeypatch.setenv(HOLD_ENV, point)
    monkeypatch.setattr("sys.stderr", _Watch(held, f"holding at {point}"))
    task = asyncio.ensure_future(change)
    await asyncio.wait_for(held.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.delenv(HOLD_ENV)


class _Watch(io.StringIO):
    """stderr that sets `event` when `fragment` is written (the fault point says it holds)."""

    def __init__(self, event: asyncio.Event, fragment: str) -> None:
        super().__init__()
        self._event = event
        self._fragment = fragment

    def write(self, text: str) -> int:
        if self._fragment in text:
            self._event.set()
        return super().write(text)
