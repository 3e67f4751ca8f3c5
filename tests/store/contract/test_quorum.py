"""The contract of a call with several requirements: each rule's quorum must be met at once,
an approval counts only toward the requirements that name its approver, and two stores (two
processes or replicas on one database) racing approvals decide once."""

from __future__ import annotations

import asyncio

from bot.store import MoreApprovalsNeeded, Quorum, Ruling, Shortfall, Store

from .conftest import StoreFactory
from .helpers import mention, paused_session

DEPLOY = Quorum(key="tools.run_command.rules[0]", label="deploy …", needed=1)
DROP_DB = Quorum(key="tools.run_command.rules[1]", label="drop-db …", needed=2)
BOTH = (DEPLOY, DROP_DB)


async def test_one_approval_toward_one_rule_leaves_the_others_waiting(store: Store) -> None:
    _, rows = await paused_session(store)
    ledger_id = rows[0].id

    first = await store.decide(
        ledger_id,
        "approved",
        user_id="UDEP",
        ruling=Ruling(requirements=BOTH),
        counts_for=[DEPLOY.key],
    )
    assert first.recorded and first.row.status == "pending"
    missing = (Shortfall(DROP_DB.key, "drop-db …", 0, 2),)
    assert first.why == MoreApprovalsNeeded(1, 1, missing)
    state = first.row.quorum_state()
    assert state is not None and state.counts == {"UDEP": (DEPLOY.key,)}

    second = await store.decide(
        ledger_id,
        "approved",
        user_id="UDB1",
        ruling=Ruling(requirements=BOTH),
        counts_for=[DROP_DB.key],
    )
    assert second.row.status == "pending"
    assert second.why == MoreApprovalsNeeded(2, 1, (Shortfall(DROP_DB.key, "drop-db …", 1, 2),))

    third = await store.decide(
        ledger_id,
        "approved",
        user_id="UDB2",
        ruling=Ruling(requirements=BOTH),
        counts_for=[DROP_DB.key],
    )
    assert third.recorded and third.why is None and third.row.status == "approved"
    [*_, last] = [r for r in await store.audit_rows() if r.event == "decision"]
    assert last.details["final"] is True
    assert [(r["key"], r["approvals"]) for r in last.details["requirements"]] == [
        (DEPLOY.key, ["UDEP"]),
        (DROP_DB.key, ["UDB1", "UDB2"]),
    ]


async def test_a_person_in_both_sets_counts_toward_both(store: Store) -> None:
    _, rows = await paused_session(store)
    ledger_id = rows[0].id
    both = [DEPLOY.key, DROP_DB.key]
    first = await store.decide(
        ledger_id, "approved", user_id="UBOTH", ruling=Ruling(requirements=BOTH), counts_for=both
    )
    assert first.row.status == "pending"
    assert first.why == MoreApprovalsNeeded(1, 1, (Shortfall(DROP_DB.key, "drop-db …", 1, 2),))
    second = await store.decide(
        ledger_id,
        "approved",
        user_id="UDB1",
        ruling=Ruling(requirements=BOTH),
        counts_for=[DROP_DB.key],
    )
    assert second.row.status == "approved"


async def test_approvals_toward_one_rule_never_meet_another(store: Store) -> None:
    """However many approve under one rule, a rule that names none of them is not met."""
    _, rows = await paused_session(store)
    ledger_id = rows[0].id
    for user in ("UDEP1", "UDEP2", "UDEP3"):
        outcome = await store.decide(
            ledger_id,
            "approved",
            user_id=user,
            ruling=Ruling(requirements=BOTH),
            counts_for=[DEPLOY.key],
        )
        assert outcome.row.status == "pending"
    row = await store.get_call(ledger_id)
    assert row is not None and row.status == "pending" and len(row.approvals) == 3


async def test_an_edit_counts_the_editor_toward_their_rules_only(store: Store) -> None:
    _, rows = await paused_session(store)
    row = rows[0]
    await store.decide(
        row.id,
        "approved",
        user_id="UDB1",
        ruling=Ruling(requirements=BOTH),
        counts_for=[DROP_DB.key],
    )
    edited = await store.edit_call(
        row.id,
        '{"x":1}',
        "d" * 64,
        user_id="UDEP",
        ruling=Ruling(requirements=BOTH),
        counts_for=[DEPLOY.key],
    )
    assert edited.recorded and edited.row.status == "pending"
    assert edited.row.approvals == ("UDEP",)  # the earlier approval was for another call
    assert edited.why == MoreApprovalsNeeded(1, 1, (Shortfall(DROP_DB.key, "drop-db …", 0, 2),))


async def test_two_stores_racing_the_last_approvals_decide_once(new_store: StoreFactory) -> None:
    async with new_store(person=mention) as a, new_store(person=mention) as b:
        _, rows = await paused_session(a)
        ledger_id = rows[0].id
        await a.decide(
            ledger_id,
            "approved",
            user_id="UDEP",
            ruling=Ruling(requirements=BOTH),
            counts_for=[DEPLOY.key],
        )
        outcomes = await asyncio.gather(
            *(
                (a if i % 2 else b).decide(
                    ledger_id,
                    "approved",
                    user_id=f"UDB{i}",
                    ruling=Ruling(requirements=BOTH),
                    counts_for=[DROP_DB.key],
                )
                for i in range(6)
            )
        )
        row = await b.get_call(ledger_id)
    assert row is not None and row.status == "approved"
    # Exactly two drop-db approvals were recorded: the second of them approved the call.
    recorded = [o for o in outcomes if o.recorded]
    assert len(recorded) == 2
    assert [o.row.status for o in recorded].count("approved") == 1
    assert len(row.approvals) == 3
