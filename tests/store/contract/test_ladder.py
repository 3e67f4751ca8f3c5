"""The contract of "when nobody answers": each escalation step and each reminder round of a
waiting call is claimed once, by one of any number of stores (processes or replicas) on one
database, with its audit row and the direct messages it owes; a decided call is never
escalated or reminded about."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.store import LadderClaim, OutboxEntry, Quorum, Ruling, Store

from .conftest import StoreFactory
from .helpers import mention, paused_session


def _dm(user: str) -> OutboxEntry:
    return OutboxEntry("chat.postMessage", {"channel": user, "text": "waiting"}, 5, user)


async def _carded(store: Store) -> list[str]:
    _, rows = await paused_session(store)
    for n, row in enumerate(rows):
        await store.set_card(row.id, "C1", f"1700000000.00020{n}")
    return [row.id for row in rows]


async def test_only_carded_waiting_calls_are_listed(store: Store) -> None:
    _, rows = await paused_session(store)
    assert await store.waiting_calls() == []
    await store.set_card(rows[0].id, "C1", "1700000000.000200")
    assert [r.id for r in await store.waiting_calls()] == [rows[0].id]


async def test_two_stores_racing_one_step_pass_it_once(new_store: StoreFactory) -> None:
    async with new_store(person=mention) as one, new_store(person=mention) as two:
        ledger_id = (await _carded(one))[0]
        row = await one.get_call(ledger_id)
        assert row is not None and row.escalation_step == 0
        details = {"step": 1, "added": ["U0SECOND"]}
        won = await asyncio.gather(
            *[s.claim_escalation(row, 1, details, [_dm("U0SECOND")]) for s in (one, two, one, two)]
        )
        assert sorted(won) == [False, False, False, True]
        after = await two.get_call(ledger_id)
        assert after is not None and after.escalation_step == 1
        escalated = [r for r in await one.audit_rows() if r.event == "escalated"]
        assert [(r.details["step"], r.details["added"]) for r in escalated] == [(1, ["U0SECOND"])]
        claimed = await one.claim_outbox("t", limit=50, lease=timedelta(seconds=30))
        dms = [r for r in claimed if r.params.get("channel") == "U0SECOND"]
        assert len(dms) == 1
        # A stale view of the row (step 0) cannot pass step 1 again, nor jump to step 2.
        assert not await two.claim_escalation(row, 2, {"step": 2, "added": []})
        assert await two.claim_escalation(after, 2, {"step": 2, "added": []})


async def test_reminders_are_claimed_once_per_round(new_store: StoreFactory) -> None:
    async with new_store(person=mention) as one, new_store(person=mention) as two:
        ledger_id = (await _carded(one))[0]
        row = await one.get_call(ledger_id)
        assert row is not None
        details = {"round": 1, "to": ["U0A"]}
        won = await asyncio.gather(
            one.claim_reminder(row, 1, details), two.claim_reminder(row, 1, details)
        )
        assert sorted(won) == [False, True]
        again = await one.get_call(ledger_id)
        assert again is not None and again.reminders_sent == 1
        reminded = [r for r in await two.audit_rows() if r.event == "reminded"]
        assert [r.details["to"] for r in reminded] == [["U0A"]]


async def test_a_decided_call_is_never_escalated(store: Store) -> None:
    ledger_id = (await _carded(store))[0]
    row = await store.get_call(ledger_id)
    assert row is not None
    await store.decide(ledger_id, "rejected", user_id="U0NO")
    assert not await store.claim_escalation(row, 1, {"step": 1, "added": []})
    assert not await store.claim_reminder(row, 1, {"round": 1, "to": []})
    assert ledger_id not in [r.id for r in await store.waiting_calls()]


async def test_racing_batches_of_claims_make_each_once(new_store: StoreFactory) -> None:
    """A tick claims many calls' steps and reminders in one transaction: two stores racing
    the same batch make each claim once between them, and a claim already made (or on a
    decided call) does not stop the rest of its batch."""
    async with new_store(person=mention) as one, new_store(person=mention) as two:
        first, *_, second = await _carded(one)
        a, b = await one.get_call(first), await one.get_call(second)
        assert a is not None and b is not None
        batch = [
            LadderClaim(a, "escalation_step", 0, 1, {"step": 1, "added": ["U0S"]}, [_dm("U0S")]),
            LadderClaim(a, "escalation_step", 1, 2, {"step": 2, "added": ["U0T"]}, [_dm("U0T")]),
            LadderClaim(a, "reminders_sent", 0, 1, {"round": 1, "to": ["U0S"]}, [_dm("U0S")]),
            LadderClaim(b, "escalation_step", 0, 1, {"step": 1, "added": []}),
        ]
        assert [c.made for c in await one.claim_all(batch[3:])] == [True]  # before the race
        raced = await asyncio.gather(one.claim_all(batch), two.claim_all(batch))
        made = [[c.made for c in claimed] for claimed in raced]
        assert [x or y for x, y in zip(*made, strict=True)] == [True, True, True, False]
        assert [x and y for x, y in zip(*made, strict=True)] == [False] * 4
        after = await two.get_call(first)
        assert after is not None and (after.escalation_step, after.reminders_sent) == (2, 1)
        audit = await one.audit_rows()
        steps = [
            (r.details["ledger_id"], r.details["step"]) for r in audit if r.event == "escalated"
        ]
        assert sorted(steps) == sorted([(first, 1), (first, 2), (second, 1)])
        assert len([r for r in audit if r.event == "reminded"]) == 1
        claimed = await one.claim_outbox("t", limit=50, lease=timedelta(seconds=30))
        dms = sorted(r.params["channel"] for r in claimed if r.method == "chat.postMessage")
        assert dms == ["U0S", "U0S", "U0T"]


async def test_a_step_lowering_the_quorum_approves_with_its_claim(
    new_store: StoreFactory,
) -> None:
    """A step whose quorum is at or below the approvals already given approves the call in
    the claim's transaction, once, however many stores race it; one that is not met leaves
    the call waiting."""
    async with new_store(person=mention) as one, new_store(person=mention) as two:
        first, *_, second = await _carded(one)
        for ledger_id in (first, second):
            outcome = await one.decide(
                ledger_id, "approved", user_id="U0A", ruling=Ruling(required_approvals=2)
            )
            assert outcome.recorded and outcome.row.status == "pending"
        a, b = await one.get_call(first), await one.get_call(second)
        assert a is not None and b is not None
        lowered = (Quorum(key="channel", needed=1),)
        step = {"step": 1, "added": []}
        racing = [LadderClaim(a, "escalation_step", 0, 1, step, needs=lowered)]
        raced = await asyncio.gather(one.claim_all(racing), two.claim_all(racing))
        [won] = [c for claimed in raced for c in claimed if c.made]
        assert won.approved is not None and won.approved.status == "approved"
        assert won.approved.decided_by == "U0A" and won.approved.approvals == ("U0A",)
        unmet = (Quorum(key="channel", needed=2),)
        [kept] = await two.claim_all([LadderClaim(b, "escalation_step", 0, 1, step, needs=unmet)])
        assert kept.made and kept.approved is None
        after = await one.get_call(second)
        assert after is not None and after.status == "pending"
        audit = await two.audit_rows()
        finals = [r.details for r in audit if r.event == "decision" and r.details.get("final")]
        assert [(d["ledger_id"], d["step"], d["approved_by"]) for d in finals] == [
            (first, 1, ["U0A"])
        ]
