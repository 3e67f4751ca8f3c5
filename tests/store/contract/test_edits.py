"""The contract of edits and allowances: an edit is a decision (one winner), resets the count,
keeps the model's arguments; allowances are listed while active and revoked once; "Allow for"
approves and creates its allowance in one transaction; a click bound to a digest the call no
longer has counts for nothing."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from agent_core import call_digest, canonical_arguments
from bot.store import (
    AllowanceGrant,
    AlreadyDecided,
    ArgumentsChanged,
    MoreApprovalsNeeded,
    Quorum,
    Ruling,
    Store,
)

from .conftest import StoreFactory
from .helpers import RESTART, T0, Clock, mention, paused_session

EDITED = {"service": "web", "force": False}


def _edit() -> tuple[str, str]:
    return canonical_arguments(EDITED), call_digest("restart_service", EDITED)


async def test_an_edit_approves_the_edited_call_and_keeps_the_models_arguments(
    store: Store,
) -> None:
    session_id, rows = await paused_session(store)
    arguments, digest = _edit()
    outcome = await store.edit_call(
        rows[0].id, arguments, digest, user_id="UEDIT", ruling=Ruling(rule="ops")
    )
    assert outcome.recorded and outcome.why is None
    row = outcome.row
    assert (row.status, row.decided_by, row.approvals) == ("approved", "UEDIT", ("UEDIT",))
    assert row.arguments == rows[0].arguments  # the model's own
    assert row.running_arguments() == EDITED and row.running_digest == digest
    assert (row.edited_by, row.edited_digest) == ("UEDIT", digest)
    # The resume runs the edited arguments, named as the editor's.
    await store.decide(rows[2].id, "rejected", user_id="UBOB")
    responses = {r.call_id: r for r in await store.responses_for_batch(session_id)}
    restart = responses[RESTART.id]
    assert restart.approved and restart.edited_arguments == EDITED
    assert restart.decided_by == "<@UEDIT>"
    assert responses["call_drop"].edited_arguments is None
    audit = [a for a in await store.audit_rows() if a.event == "edited"]
    assert len(audit) == 1 and audit[0].actor == "UEDIT"
    details = audit[0].details
    assert details["original"] == {"service": "api", "force": True}
    assert details["edited"] == EDITED
    assert (details["digest_before"], details["digest"]) == (rows[0].digest, digest)


async def test_an_edit_that_counts_no_approval_leaves_the_call_pending(store: Store) -> None:
    """`approve=False` (the edited call has a preview nobody has seen): the edit is stored,
    earlier approvals are dropped, and nobody's approval counts yet."""
    _, rows = await paused_session(store)
    ledger_id = rows[0].id
    await store.decide(ledger_id, "approved", user_id="UALICE", ruling=Ruling(required_approvals=2))
    arguments, digest = _edit()
    edit = await store.edit_call(
        ledger_id,
        arguments,
        digest,
        user_id="UBOB",
        ruling=Ruling(
            rule="ops", policy_rule="tools.restart_service.rules[0]", policy_match="service ~ /web/"
        ),
        approve=False,
    )
    assert edit.recorded and edit.row.status == "pending" and edit.row.approvals == ()
    assert edit.row.running_digest == digest and edit.why == MoreApprovalsNeeded(0, 1)
    details = (await store.audit_rows())[-1].details
    assert (details["approvals"], details["final"]) == (0, False)
    assert details["discarded_approvals"] == ["UALICE"]
    assert details["policy_rule"] == "tools.restart_service.rules[0]"
    assert details["policy_match"] == "service ~ /web/" and details["rule"] == "ops"
    done = await store.decide(ledger_id, "approved", user_id="UBOB", digest=digest)
    assert done.recorded and done.row.status == "approved"


async def test_an_edit_discards_approvals_of_the_old_arguments(store: Store) -> None:
    _, rows = await paused_session(store)
    ledger_id = rows[0].id
    first = await store.decide(
        ledger_id, "approved", user_id="UALICE", ruling=Ruling(required_approvals=2)
    )
    assert first.row.approvals == ("UALICE",)
    arguments, digest = _edit()
    edit = await store.edit_call(
        ledger_id, arguments, digest, user_id="UBOB", ruling=Ruling(required_approvals=2)
    )
    assert edit.recorded and edit.row.status == "pending"
    assert edit.row.approvals == ("UBOB",)
    assert edit.why == MoreApprovalsNeeded(1, 2)
    assert (await store.audit_rows())[-1].details["discarded_approvals"] == ["UALICE"]
    # Alice approves again, now the edited call: that completes it.
    again = await store.decide(
        ledger_id, "approved", user_id="UALICE", ruling=Ruling(required_approvals=2)
    )
    assert again.recorded and again.row.status == "approved"
    assert again.row.approvals == ("UBOB", "UALICE")


async def test_an_edit_of_a_decided_or_expired_call_is_refused(store: Store, clock: Clock) -> None:
    _, rows = await paused_session(store)
    await store.decide(rows[0].id, "rejected", user_id="UALICE")
    arguments, digest = _edit()
    late = await store.edit_call(rows[0].id, arguments, digest, user_id="UBOB")
    assert not late.recorded
    assert late.why == AlreadyDecided("rejected", ("UALICE",), late.row.decided_at)
    assert late.row.edited_arguments is None
    await store.set_expiry(rows[2].id, T0 + timedelta(minutes=5))
    clock.advance(minutes=6)
    expired = await store.edit_call(rows[2].id, arguments, digest, user_id="UBOB")
    assert not expired.recorded and expired.row.status == "expired"


async def test_an_edit_racing_an_approval_has_one_winner(new_store: StoreFactory) -> None:
    arguments, digest = _edit()
    async with new_store(person=mention) as a, new_store(person=mention) as b:
        _, rows = await paused_session(a)
        edit, approve = await asyncio.gather(
            a.edit_call(rows[0].id, arguments, digest, user_id="UEDIT"),
            b.decide(rows[0].id, "approved", user_id="UALICE"),
        )
        assert edit.recorded != approve.recorded
        stored = await a.get_call(rows[0].id)
    assert stored is not None and stored.status == "approved"
    assert (stored.edited_arguments is not None) == edit.recorded


async def test_allowances_are_listed_while_active_and_revoked_once(
    store: Store, clock: Clock
) -> None:
    shape = json.dumps({"kind": "command", "program": "kubectl", "subcommand": "get"})
    made = await store.create_allowance(
        channel_id="C1",
        tool="run_command",
        shape=shape,
        label="`kubectl get …`",
        granted_by="UALICE",
        ledger_id="L1",
        expires_at=T0 + timedelta(hours=1),
    )
    assert made.active(T0) and made.expires_at == T0 + timedelta(hours=1)
    assert await store.get_allowance(made.id) == made
    assert [a.id for a in await store.active_allowances(channel_id="C1")] == [made.id]
    assert await store.active_allowances(channel_id="C2") == []
    assert await store.active_allowances(now=T0 + timedelta(hours=1)) == []
    clock.advance(minutes=59, seconds=59)
    assert [a.id for a in await store.active_allowances()] == [made.id]
    assert await store.revoke_allowance(made.id, user_id="UBOB")
    assert not await store.revoke_allowance(made.id, user_id="UCAROL")
    assert await store.active_allowances() == []
    revoked = await store.get_allowance(made.id)
    assert revoked is not None and revoked.revoked_by == "UBOB"
    events = [(a.event, a.actor) for a in await store.audit_rows()]
    assert events == [("allowance", "UALICE"), ("allowance_revoked", "UBOB")]


def _grant(channel: str = "C1") -> AllowanceGrant:
    exact = canonical_arguments({"service": "api", "force": True})
    shape = json.dumps({"kind": "exact", "arguments": exact})
    return AllowanceGrant(
        channel_id=channel,
        tool="restart_service",
        shape=shape,
        label="these exact arguments",
        expires_at=T0 + timedelta(hours=1),
    )


async def test_allow_call_approves_and_creates_the_allowance_together(store: Store) -> None:
    _, rows = await paused_session(store)
    ledger_id = rows[0].id
    outcome = await store.allow_call(
        ledger_id, _grant(), user_id="UBOB", ruling=Ruling(rule="allow_for"), digest=rows[0].digest
    )
    assert outcome.decision.recorded and outcome.decision.row.status == "approved"
    assert outcome.allowance is not None
    assert (outcome.allowance.granted_by, outcome.allowance.ledger_id) == ("UBOB", ledger_id)
    assert [a.id for a in await store.active_allowances()] == [outcome.allowance.id]
    events = [a.event for a in await store.audit_rows() if a.event in ("decision", "allowance")]
    assert events == ["decision", "allowance"]
    # A second Allow on the decided call records nothing and creates no second allowance.
    again = await store.allow_call(ledger_id, _grant(), user_id="UCAROL", digest=rows[0].digest)
    assert not again.decision.recorded and again.allowance is None
    assert isinstance(again.decision.why, AlreadyDecided)
    assert len(await store.active_allowances()) == 1


async def test_allow_for_approves_with_one_approval_whatever_quorum_the_ruling_names(
    store: Store,
) -> None:
    _, rows = await paused_session(store)
    two = Quorum(key="tools.restart_service.rules[0]", label="restarts", needed=2)
    ruling = Ruling(
        rule="allow_for", policy_rule=two.key, required_approvals=2, requirements=(two,)
    )
    outcome = await store.allow_call(rows[0].id, _grant(), user_id="UBOB", ruling=ruling)
    assert outcome.decision.recorded and outcome.decision.row.status == "approved"
    assert outcome.allowance is not None
    (decided,) = [a for a in await store.audit_rows() if a.event == "decision"]
    assert decided.details["required_approvals"] == 1
    assert (decided.details["rule"], decided.details["policy_rule"]) == ("allow_for", two.key)


def test_a_ruling_needs_at_least_one_approval() -> None:
    assert Ruling().needs == (Quorum(key="channel", needed=1),)
    with pytest.raises(ValueError, match="required_approvals must be at least 1, not 0"):
        Ruling(required_approvals=0)


async def test_a_click_bound_to_the_pre_edit_digest_records_nothing(store: Store) -> None:
    _, rows = await paused_session(store)
    ledger_id, shown = rows[0].id, rows[0].digest
    arguments, digest = _edit()
    await store.edit_call(
        ledger_id, arguments, digest, user_id="UEDIT", ruling=Ruling(required_approvals=2)
    )
    stale = await store.decide(
        ledger_id, "approved", user_id="UBOB", ruling=Ruling(required_approvals=2), digest=shown
    )
    assert not stale.recorded and stale.why == ArgumentsChanged(shown, digest)
    assert stale.row.approvals == ("UEDIT",) and stale.row.status == "pending"
    allowed = await store.allow_call(ledger_id, _grant(), user_id="UBOB", digest=shown)
    assert not allowed.decision.recorded and allowed.allowance is None
    assert await store.active_allowances() == []
    refusals = [a for a in await store.audit_rows() if a.event == "refusal"]
    assert [r.details["why"] for r in refusals] == ["arguments_changed"] * 2
    # Bound to what the redrawn card shows, the same click counts.
    fresh = await store.decide(
        ledger_id, "approved", user_id="UBOB", ruling=Ruling(required_approvals=2), digest=digest
    )
    assert fresh.recorded and fresh.row.status == "approved"


async def test_decision_and_refusal_rows_carry_the_policy_rule(store: Store) -> None:
    """`details.policy_rule` names the policy rule that gated the call, next to
    `details.rule` (who may decide), on decision and refusal rows, from `decide` and
    `allow_call` alike."""
    _, rows = await paused_session(store)
    first, second = [r for r in rows if r.needs_approval]
    rule = "tools.restart_service.rules[0]"
    await store.decide(
        first.id, "approved", user_id="UBOB", ruling=Ruling(rule="ops", policy_rule=rule)
    )
    await store.decide(
        first.id, "approved", user_id="UCAROL", ruling=Ruling(rule="ops", policy_rule=rule)
    )
    await store.allow_call(
        second.id,
        _grant(),
        user_id="UBOB",
        ruling=Ruling(rule="allow_for", policy_rule=rule),
        digest="0" * 64,
    )
    audited = [a for a in await store.audit_rows() if a.event in ("decision", "refusal")]
    assert [(a.event, a.details["rule"], a.details["policy_rule"]) for a in audited] == [
        ("decision", "ops", rule),
        ("refusal", "ops", rule),
        ("refusal", "allow_for", rule),
    ]
