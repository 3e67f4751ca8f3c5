"""The contract of "when nobody answers": each escalation step and each reminder round of a
waiting call is claimed once, by one of any number of stores (processes or replicas) on one
database, with its audit row and the direct messages it owes; a decided call is never
escalated or reminded about."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from datetime import timedelta

import pytest

from bot.store import Claimed, LadderClaim, OutboxEntry, Quorum, Ruling, Store, ToolCallRow
from bot.store.chain import Intact, key_mark, verify_chain

from .conftest import StoreFactory
from .helpers import mention, paused_session


def _dm(user: str, text: str = "waiting") -> OutboxEntry:
    return OutboxEntry("chat.postMessage", {"channel": user, "text": text}, 5, user)


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


# -- a tick's worth of claims ----------------------------------------------------------------


async def _many_carded(store: Store, sessions: int) -> list[ToolCallRow]:
    """`sessions` paused sessions' gated calls, each with its card posted."""
    rows: list[ToolCallRow] = []
    for n in range(sessions):
        _, batch = await paused_session(store, thread=f"1700000000.{n:06d}")
        for row in batch:
            await store.set_card(row.id, "C1", f"1700000001.{len(rows):06d}")
            fresh = await store.get_call(row.id)
            assert fresh is not None
            rows.append(fresh)
    return [row for row in rows if row.needs_approval]


def _tick_claims(row: ToolCallRow) -> list[LadderClaim]:
    """What a tick claims for a call both steps and a reminder round are due for."""
    return [
        LadderClaim(
            row, "escalation_step", 0, 1, {"step": 1, "added": ["U0S"]}, [_dm("U0S", row.id)]
        ),
        LadderClaim(
            row, "escalation_step", 1, 2, {"step": 2, "added": ["U0T"]}, [_dm("U0T", row.id)]
        ),
        LadderClaim(
            row,
            "reminders_sent",
            0,
            1,
            {"round": 1, "to": ["U0A", "U0B"]},
            [_dm("U0A", row.id), _dm("U0B", row.id)],
        ),
    ]


async def _chain_verdict(store: Store, key: bytes | None = None) -> object:
    recorded = await store.audit_head()
    rows = await store.audit_entries()
    return verify_chain(rows, key=key, keyed=recorded.keyed, chain_seq=recorded.seq)


async def test_two_stores_racing_a_tick_over_many_calls_claim_each_once(
    new_store: StoreFactory,
) -> None:
    """Two replicas whose timers fire together, each claiming a tick's worth of steps and
    reminders a few calls per transaction (one from the first call on, the other from the
    last, so they meet in the middle, where both claim the same calls at once): every step
    and round is made by exactly one of them, with one audit row, its direct messages and its
    card's redraw owed once, and the audit chain unbroken."""
    async with new_store(person=mention) as one, new_store(person=mention) as two:
        rows = await _many_carded(one, 39)
        chunks = [
            [claim for row in rows[n : n + 6] for claim in _tick_claims(row)]
            for n in range(0, len(rows), 6)
        ]
        assert len(chunks) % 2 == 1  # the middle chunk is raced by both at once
        by_one: list[list[Claimed]] = []
        by_two: list[list[Claimed]] = []
        for mine, theirs in zip(chunks, chunks[::-1], strict=True):
            made = await asyncio.gather(
                one.claim_all(mine, wake=False), two.claim_all(theirs, wake=False)
            )
            by_one.append(made[0])
            by_two.insert(0, made[1])
        first = [c.made for chunk in by_one for c in chunk]
        second = [c.made for chunk in by_two for c in chunk]
        assert [a != b for a, b in zip(first, second, strict=True)] == [True] * len(first)
        ids = {row.id for row in rows}
        for row in [await two.get_call(ledger_id) for ledger_id in ids]:
            assert row is not None and (row.escalation_step, row.reminders_sent) == (2, 1)
        audit = await one.audit_rows()
        steps = Counter(
            (a.details["ledger_id"], a.details["step"]) for a in audit if a.event == "escalated"
        )
        assert steps == Counter({(i, s): 1 for i in ids for s in (1, 2)})
        reminded = Counter(a.details["ledger_id"] for a in audit if a.event == "reminded")
        assert reminded == Counter({i: 1 for i in ids})
        owed = await one.claim_outbox("t", limit=10_000, lease=timedelta(seconds=30))
        dms = Counter(
            (r.params["channel"], r.params["text"]) for r in owed if r.method == "chat.postMessage"
        )
        assert dms == Counter({(u, i): 1 for i in ids for u in ("U0S", "U0T", "U0A", "U0B")})
        redraws = Counter(r.key for r in owed if r.method == "opsgate.card")
        assert redraws == Counter({f"card:{i}": 1 for i in ids})
        assert isinstance(await _chain_verdict(two), Intact)


async def test_batched_claims_keep_the_keyed_chain_whole_and_in_order(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's audit rows are appended together, around another store's single append:
    the keyed chain verifies with no gap; a step that approves its call (a lowered quorum
    met) is followed by the decision's row, and the call's later claims in the batch are
    not made (it no longer waits)."""
    monkeypatch.setenv("OPSGATE_AUDIT_KEY", "s3cret")
    async with new_store(person=mention) as one, new_store(person=mention) as two:
        first, *rest = await _many_carded(one, 5)
        outcome = await one.decide(
            first.id, "approved", user_id="U0A", ruling=Ruling(required_approvals=2)
        )
        assert outcome.recorded and outcome.row.status == "pending"
        stepping, lowering, reminding = _tick_claims(outcome.row)
        lowering = replace(lowering, needs=(Quorum(key="channel", needed=1),))
        claims = [stepping, lowering, reminding] + [c for r in rest for c in _tick_claims(r)]
        made = await one.claim_all(claims[:14])
        await two.audit("request", actor="U9", details={"between": True})
        made += await one.claim_all(claims[14:])
        assert [c.made for c in made] == [True, True, False] + [True] * (len(claims) - 3)
        approved = made[1].approved
        assert approved is not None and approved.status == "approved"
        audit = await two.audit_rows()
        assert [r.seq for r in audit] == list(range(1, len(audit) + 1))
        about_first = [
            (r.event, r.details.get("step"))
            for r in audit
            if r.details.get("ledger_id") == first.id and r.event != "request"
        ]
        assert about_first[-3:] == [("escalated", 1), ("escalated", 2), ("decision", 2)]
        assert isinstance(await _chain_verdict(two, key=b"s3cret"), Intact)
        assert (await two.audit_head()).keyed == key_mark(b"s3cret")
