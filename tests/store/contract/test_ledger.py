"""The contract of the ledger: a paused batch, cards, decisions, expiry and execution marks."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from agent_core import (
    ChatMessage,
    ToolApprovalRequest,
    ToolCall,
    ToolCallAlreadyStarted,
    call_digest,
    canonical_arguments,
)
from bot.store import (
    AlreadyApprovedByYou,
    AlreadyDecided,
    CallExpired,
    MoreApprovalsNeeded,
    NeedsNoApproval,
    Ruling,
    Store,
    StoreError,
    UnknownCall,
    batch_complete,
)
from tests.support.scripted import call

from .conftest import StoreFactory
from .helpers import DROP, RESTART, STATUS, T0, Clock, mention, paused_session


async def test_record_pause_writes_message_ledger_state_and_requests_at_once(
    store: Store,
) -> None:
    session_id, rows = await paused_session(store)

    history = await store.load_messages(session_id)
    assert [c.id for c in history[-1].tool_calls] == [RESTART.id, STATUS.id, DROP.id]
    assert [r.call_id for r in rows] == [RESTART.id, STATUS.id, DROP.id]
    assert [r.needs_approval for r in rows] == [True, False, True]
    assert {r.status for r in rows} == {"pending"}
    assert len({r.batch_id for r in rows}) == 1 and rows[0].batch_id is not None
    assert len({r.id for r in rows}) == 3
    assert all(r.requested_by == "UREQ" for r in rows)
    restart = rows[0]
    assert restart.arguments == canonical_arguments({"service": "api", "force": True})
    assert restart.arguments_value() == {"force": True, "service": "api"}
    assert restart.digest == call_digest("restart_service", {"service": "api", "force": True})
    assert restart.tool == "restart_service"
    session = await store.get_session(session_id)
    assert session is not None
    assert (session.state, session.batch_id) == ("awaiting_approval", restart.batch_id)
    requests = [a for a in await store.audit_rows() if a.event == "request"]
    assert [(a.call_id, a.actor) for a in requests] == [(RESTART.id, "UREQ"), (DROP.id, "UREQ")]
    assert requests[0].details["ledger_id"] == restart.id
    assert requests[0].details["digest"] == restart.digest
    assert await store.get_call(restart.id) == restart
    assert await store.find_call(session_id, DROP.id) == rows[2]
    assert await store.get_call("nope") is None


async def test_a_pause_that_fails_leaves_nothing_behind(store: Store) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    message = ChatMessage.assistant(None, (RESTART, RESTART))
    request = ToolApprovalRequest(RESTART.id, RESTART.name, {}, "d", "x")
    with pytest.raises(StoreError, match="repeats a tool call id"):
        await store.record_pause(session.id, message, [request], [])
    stray = ToolApprovalRequest("call_other", "x", {}, "d", "x")
    with pytest.raises(StoreError, match="call_other"):
        await store.record_pause(session.id, ChatMessage.assistant(None, (STATUS,)), [stray], [])
    assert await store.load_messages(session.id) == []
    assert await store.batch_calls(session.id) == []
    assert (await store.get_session(session.id)).state == "idle"  # type: ignore[union-attr]


async def test_card_and_expiry_are_stored_on_the_row(store: Store, clock: Clock) -> None:
    _, rows = await paused_session(store)
    await store.set_card(rows[0].id, "C1", "1700000001.000200")
    await store.set_expiry(rows[0].id, T0 + timedelta(minutes=15))
    row = await store.get_call(rows[0].id)
    assert row is not None
    assert (row.card_channel, row.card_ts) == ("C1", "1700000001.000200")
    assert (row.expires_at, row.ttl) == (T0 + timedelta(minutes=15), "15m")
    assert await store.next_expiry() == T0 + timedelta(minutes=15)
    with pytest.raises(UnknownCall, match="'nope'"):
        await store.set_card("nope", "C1", "1.0")
    with pytest.raises(UnknownCall):
        await store.set_expiry("nope", T0)


# -- decisions ------------------------------------------------------------------------------------


async def test_racing_decisions_on_two_connections_record_exactly_one(
    new_store: StoreFactory,
) -> None:
    async with new_store(person=mention) as a, new_store(person=mention) as b:
        _, rows = await paused_session(a)
        for row in (rows[0], rows[2]):
            approve, reject = await asyncio.gather(
                a.decide(
                    row.id, "approved", user_id="UALICE", team_id="T1", ruling=Ruling(rule="ops")
                ),
                b.decide(row.id, "rejected", user_id="UBOB", team_id="T1", reason="not now"),
            )
            assert approve.recorded != reject.recorded
            winner, loser = (approve, reject) if approve.recorded else (reject, approve)
            who = "UALICE" if winner is approve else "UBOB"
            stored = await b.get_call(row.id)
            assert stored is not None
            assert stored.status == winner.row.status
            assert (stored.decided_by, stored.decided_team) == (who, "T1")
            assert loser.row.status == winner.row.status
            assert loser.why == AlreadyDecided(winner.row.status, (who,), T0)
        audit = [r for r in await a.audit_rows() if r.event in ("decision", "refusal")]
    assert sorted(r.event for r in audit) == ["decision", "decision", "refusal", "refusal"]
    refusal = next(r for r in audit if r.event == "refusal")
    assert refusal.details["why"].startswith("already")
    assert refusal.actor in ("UALICE", "UBOB")


async def test_many_racing_approvers_record_one_decision(new_store: StoreFactory) -> None:
    async with new_store(person=mention) as a, new_store(person=mention) as b:
        _, rows = await paused_session(a)
        outcomes = await asyncio.gather(
            *(
                (a if i % 2 else b).decide(rows[0].id, "approved", user_id=f"U{i}")
                for i in range(12)
            )
        )
    assert [o.recorded for o in outcomes].count(True) == 1


async def test_n_of_m_approvals_need_distinct_users(store: Store) -> None:
    _, rows = await paused_session(store)
    ledger_id = rows[0].id

    first = await store.decide(
        ledger_id, "approved", user_id="U1", ruling=Ruling(required_approvals=2)
    )
    assert first.recorded and first.row.status == "pending"
    assert first.row.approvals == ("U1",)
    assert first.why == MoreApprovalsNeeded(1, 2)

    repeat = await store.decide(
        ledger_id, "approved", user_id="U1", ruling=Ruling(required_approvals=2)
    )
    assert not repeat.recorded and repeat.why == AlreadyApprovedByYou()
    assert repeat.row.approvals == ("U1",)

    second = await store.decide(
        ledger_id,
        "approved",
        user_id="U2",
        team_id="T1",
        ruling=Ruling(required_approvals=2, rule="two-man"),
    )
    assert second.recorded and second.why is None
    assert second.row.status == "approved"
    assert second.row.approvals == ("U1", "U2")
    assert second.row.decided_by == "U2"

    late = await store.decide(
        ledger_id, "approved", user_id="U3", ruling=Ruling(required_approvals=2)
    )
    assert not late.recorded
    assert late.why == AlreadyDecided("approved", ("U1", "U2"), T0)

    decisions = [r for r in await store.audit_rows() if r.event == "decision"]
    assert [(r.actor, r.details["final"]) for r in decisions] == [("U1", False), ("U2", True)]
    assert decisions[1].details["rule"] == "two-man"


async def test_one_rejection_rejects_a_partly_approved_call(store: Store) -> None:
    _, rows = await paused_session(store)
    await store.decide(rows[0].id, "approved", user_id="U1", ruling=Ruling(required_approvals=3))
    outcome = await store.decide(rows[0].id, "rejected", user_id="U2", reason="risky")
    assert outcome.recorded
    assert (outcome.row.status, outcome.row.reason, outcome.row.decided_by) == (
        "rejected",
        "risky",
        "U2",
    )


async def test_decisions_on_held_or_unknown_calls_are_refused(store: Store) -> None:
    _, rows = await paused_session(store)
    held = await store.decide(rows[1].id, "approved", user_id="U1")
    assert not held.recorded and held.why == NeedsNoApproval()
    assert held.row.status == "pending"
    with pytest.raises(UnknownCall, match="'forged'"):
        await store.decide("forged", "approved", user_id="U1")
    with pytest.raises(ValueError, match="decision"):
        await store.decide(rows[0].id, "maybe", user_id="U1")  # type: ignore[arg-type]


async def test_batch_complete_and_responses(store: Store) -> None:
    session_id, rows = await paused_session(store)
    assert not batch_complete(rows)
    assert not batch_complete([])
    assert not batch_complete([rows[1]])  # held siblings alone are no paused batch
    await store.decide(rows[0].id, "approved", user_id="U1", reason="looks fine")
    assert not batch_complete(await store.batch_calls(session_id))
    await store.decide(rows[2].id, "rejected", user_id="U2")
    assert batch_complete(await store.batch_calls(session_id))

    # The store keeps ids plain and names deciders with its `person` (here the bot's mention).
    responses = await store.responses_for_batch(session_id)
    assert [(r.call_id, r.decision, r.decided_by) for r in responses] == [
        (RESTART.id, "approved", "<@U1>"),
        (DROP.id, "rejected", "<@U2>"),
    ]
    assert responses[0].reason == "looks fine"
    assert responses[1].tool_message_text() == "Rejected: User denied (rejected by <@U2>)"


async def test_a_store_names_people_by_plain_id_unless_given_a_person(
    new_store: StoreFactory,
) -> None:
    async with new_store() as store:
        session_id, rows = await paused_session(store)
        await store.decide(rows[0].id, "approved", user_id="U1")
        late = await store.decide(rows[0].id, "approved", user_id="U2")
        responses = await store.responses_for_batch(session_id)
    assert late.why == AlreadyDecided("approved", ("U1",), T0)
    assert [r.decided_by for r in responses] == ["U1"]


# -- expiry ---------------------------------------------------------------------------------------


async def test_expire_due_expires_undecided_gated_calls(store: Store, clock: Clock) -> None:
    session_id, rows = await paused_session(store)
    await store.set_expiry(rows[0].id, T0 + timedelta(minutes=15))
    await store.set_expiry(rows[2].id, T0 + timedelta(hours=2), ttl="2h")
    await store.decide(rows[2].id, "approved", user_id="U1")

    assert await store.expire_due() == []
    clock.advance(minutes=15)
    expired = await store.expire_due()
    assert [(r.id, r.status, r.ttl) for r in expired] == [(rows[0].id, "expired", "15m")]
    assert await store.expire_due() == []
    assert await store.next_expiry() is None

    late = await store.decide(rows[0].id, "approved", user_id="U2")
    assert not late.recorded
    assert late.why == CallExpired(T0 + timedelta(minutes=15), "15m")
    responses = await store.responses_for_batch(session_id)
    assert responses[0].decision == "expired"
    assert responses[0].tool_message_text() == (
        "Expired: no decision within 15m; the call was not run"
    )
    events = [(r.event, r.actor) for r in await store.audit_rows() if r.call_id == RESTART.id]
    assert events[-2:] == [("expiry", None), ("refusal", "U2")]


async def test_a_click_after_the_deadline_expires_the_call_instead(
    store: Store, clock: Clock
) -> None:
    _, rows = await paused_session(store)
    await store.set_expiry(rows[0].id, T0 + timedelta(minutes=5))
    clock.advance(minutes=6)
    outcome = await store.decide(rows[0].id, "approved", user_id="U1")
    assert not outcome.recorded
    assert outcome.row.status == "expired"
    assert isinstance(outcome.why, CallExpired)
    assert outcome.why.at == T0 + timedelta(minutes=5)


async def test_set_expiry_says_the_time_left_in_round_words(store: Store, clock: Clock) -> None:
    _, rows = await paused_session(store)
    clock.advance(seconds=3)  # the card went out a moment after the pause
    await store.set_expiry(rows[0].id, T0 + timedelta(minutes=15))
    await store.set_expiry(rows[2].id, T0 + timedelta(minutes=1, seconds=33))
    assert [(r.ttl) for r in await store.batch_calls(rows[0].session_id)] == ["15m", None, "1m30s"]


async def test_the_ledger_shows_and_digests_arguments_as_the_loop_does(
    store: Store,
) -> None:
    """`ToolCall.display_arguments()` is the one spelling: the parsed object, else the raw text."""
    good = call("call_good", "service_status", service="api")
    broken = ToolCall(id="call_broken", name="service_status", arguments='{"service": ')
    listed = ToolCall(id="call_list", name="service_status", arguments="[1, 2]")
    assert good.display_arguments() == {"service": "api"}
    assert broken.display_arguments() == '{"service": '
    assert listed.display_arguments() == "[1, 2]"
    session = await store.get_or_create_session("T1", "C1", "5.0")
    message = ChatMessage.assistant(None, (good, broken, listed))
    await store.record_pause(session.id, message, [], [])
    rows = await store.batch_calls(session.id)
    for row, sent in zip(rows, (good, broken, listed), strict=True):
        shown = sent.display_arguments()
        assert (row.arguments, row.digest) == (
            canonical_arguments(shown),
            call_digest(sent.name, shown),
        )


# -- execution ------------------------------------------------------------------------------------


async def test_start_tool_call_allows_only_approved_or_held_calls(store: Store) -> None:
    session_id, rows = await paused_session(store)
    with pytest.raises(ToolCallAlreadyStarted) as undecided:
        await store.start_tool_call(session_id, RESTART)
    assert undecided.value.status == "pending"

    await store.decide(rows[0].id, "approved", user_id="U1")
    await store.decide(rows[2].id, "rejected", user_id="U1")
    await store.start_tool_call(session_id, RESTART)
    assert (await store.get_call(rows[0].id)).status == "executing"  # type: ignore[union-attr]
    with pytest.raises(ToolCallAlreadyStarted) as twice:
        await store.start_tool_call(session_id, RESTART)
    assert twice.value.status == "executing"
    with pytest.raises(ToolCallAlreadyStarted) as rejected:
        await store.start_tool_call(session_id, DROP)
    assert rejected.value.status == "rejected"

    await store.start_tool_call(session_id, STATUS)  # the held sibling needs no decision
    refusals = [r for r in await store.audit_rows() if r.event == "refusal"]
    assert [(r.call_id, r.details["why"]) for r in refusals] == [
        (RESTART.id, "already pending"),
        (RESTART.id, "already executing"),
        (DROP.id, "already rejected"),
    ]


async def test_finish_records_the_result_and_its_tool_message_together(
    store: Store, clock: Clock
) -> None:
    session_id, rows = await paused_session(store)
    await store.decide(rows[0].id, "approved", user_id="U1")
    await store.start_tool_call(session_id, RESTART)
    clock.advance(seconds=3)
    answer = ChatMessage.tool("restarted", RESTART.id)
    await store.finish_tool_call(session_id, RESTART, answer, is_error=False)

    row = await store.get_call(rows[0].id)
    assert row is not None
    assert (row.status, row.result, row.is_error) == ("done", "restarted", False)
    assert (row.started_at, row.finished_at) == (T0, T0 + timedelta(seconds=3))
    assert (await store.load_messages(session_id))[-1] == answer
    with pytest.raises(ToolCallAlreadyStarted):
        await store.start_tool_call(session_id, RESTART)
    with pytest.raises(StoreError, match="not executing"):
        await store.finish_tool_call(session_id, RESTART, answer, is_error=False)
    events = [r.event for r in await store.audit_rows() if r.call_id == RESTART.id]
    assert events == ["request", "decision", "execution_start", "execution_end", "refusal"]


async def test_calls_of_unpaused_rounds_get_ledger_rows_and_ids_may_repeat_later(
    store: Store,
) -> None:
    """Some providers number calls per turn ("call_0" every time): a later turn's call with a
    reused id is a new call, while the same call of the same turn can never start twice."""
    session = await store.get_or_create_session("T1", "C1", "1.0")
    lookup = call("call_0", "service_status", service="api")
    for turn in range(2):
        await store.append_messages(session.id, [ChatMessage.assistant(None, (lookup,))])
        await store.start_tool_call(session.id, lookup)
        with pytest.raises(ToolCallAlreadyStarted):
            await store.start_tool_call(session.id, lookup)
        await store.finish_tool_call(
            session.id, lookup, ChatMessage.tool(f"up ({turn})", "call_0"), is_error=False
        )
    row = await store.find_call(session.id, "call_0")
    assert row is not None
    assert (row.status, row.result, row.needs_approval, row.batch_id) == (
        "done",
        "up (1)",
        False,
        None,
    )


async def test_starting_a_call_no_message_asked_for_is_refused(store: Store) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    with pytest.raises(UnknownCall, match="call_restart"):
        await store.start_tool_call(session.id, RESTART)


async def test_a_card_drawn_pending_for_a_decided_call_is_stale(store: Store) -> None:
    _, rows = await paused_session(store)
    gated = rows[0]
    await store.set_card(gated.id, "C1", "1.1", locked="arguments_not_attached")
    assert [r.id for r in await store.stale_cards()] == [gated.id]  # never marked: redraw
    await store.card_drawn(gated.id, "pending:0")
    assert await store.stale_cards() == []
    decided = await store.decide(gated.id, "rejected", user_id="U1")
    # Its redraw is owed in the outbox, written with the decision: the sender draws it.
    assert await store.stale_cards() == []
    await store.card_drawn(gated.id, "rejected")
    assert await store.stale_cards() == []
    assert decided.row.card_locked == "arguments_not_attached"
