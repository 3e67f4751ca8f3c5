"""Model-facing outcomes: the exact text the model reads for a call that did not run (or ran
edited), that consumers tell them apart by matching on the value, and that a decision carries
its outcome with no wording of its own."""

from __future__ import annotations

import pytest

from agent_core import (
    CallOutcome,
    Cancelled,
    Edited,
    Expired,
    Interrupted,
    NotRun,
    Rejected,
    ToolApprovalResponse,
    render_outcome,
)


@pytest.mark.parametrize(
    ("outcome", "text"),
    [
        (Rejected(), "Rejected: User denied"),
        (Rejected("change freeze"), "Rejected: change freeze"),
        (Rejected(by="<@U42>"), "Rejected: User denied (rejected by <@U42>)"),
        (Rejected("change freeze", "<@U42>"), "Rejected: change freeze (rejected by <@U42>)"),
        (Expired("15m"), "Expired: no decision within 15m; the call was not run"),
        (Expired(), "Expired: no decision within the time limit; the call was not run"),
        (Cancelled("<@U7>"), "Rejected: cancelled by <@U7>"),
        (Cancelled(), "Rejected: cancelled by a user"),
        (NotRun(), "Not run: OpsGate restarted before this call ran."),
        (NotRun("<@U7>"), "Not run: the run was cancelled by <@U7>"),
        (
            Interrupted(),
            "Interrupted: OpsGate stopped while this call was running; "
            "its outcome is unknown and it was not run again.",
        ),
        (
            Edited("<@U42>", {"replicas": 50}, {"replicas": 5, "service": "api"}),
            "The call was edited by a human by <@U42> before approval; "
            'it ran with {"replicas": 5, "service": "api"}.',
        ),
        (
            Edited(None, {}, {"name": "café"}),
            'The call was edited by a human before approval; it ran with {"name": "café"}.',
        ),
    ],
)
def test_each_outcome_renders_its_exact_text(outcome: CallOutcome | Edited, text: str) -> None:
    assert render_outcome(outcome) == text


def describe(outcome: CallOutcome) -> str:
    """A consumer that tells outcomes apart by value, never by their text."""
    match outcome:
        case Rejected(by=by):
            return f"rejected:{by}"
        case Expired(ttl=ttl):
            return f"expired:{ttl}"
        case Cancelled(by=by):
            return f"cancelled:{by}"
        case NotRun(cancelled_by=by):
            return f"not_run:{by}"
        case Interrupted():
            return "interrupted"


def test_outcomes_are_told_apart_by_matching_not_by_their_text() -> None:
    # A cancellation reads "Rejected: …" to the model, yet it is not a rejection.
    assert render_outcome(Cancelled("U1")) == "Rejected: cancelled by U1"
    assert describe(Cancelled("U1")) == "cancelled:U1"
    assert describe(Rejected("no", "U2")) == "rejected:U2"
    assert describe(Expired("1h")) == "expired:1h"
    assert describe(NotRun()) == "not_run:None"
    assert describe(Interrupted()) == "interrupted"
    assert [o.kind for o in (Rejected(), Expired(), Cancelled(), NotRun(), Interrupted())] == [
        "rejected",
        "expired",
        "cancelled",
        "not_run",
        "interrupted",
    ]


def test_outcomes_are_frozen_values() -> None:
    assert Rejected("x", "U1") == Rejected("x", "U1")
    assert hash(Expired("15m")) == hash(Expired("15m"))
    with pytest.raises(AttributeError):
        Rejected().reason = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("response", "outcome"),
    [
        (ToolApprovalResponse.approve("c1", decided_by="U1"), None),
        (ToolApprovalResponse.reject("c1"), Rejected()),
        (ToolApprovalResponse.reject("c1", "freeze", decided_by="U1"), Rejected("freeze", "U1")),
        (ToolApprovalResponse.expire("c1", "15m"), Expired("15m")),
        (ToolApprovalResponse("c1", "expired"), Expired()),
        (ToolApprovalResponse("c1", "rejected", reason="r", decided_by="U1"), Rejected("r", "U1")),
        (ToolApprovalResponse.closed("c1", Cancelled("U3")), Cancelled("U3")),
        (ToolApprovalResponse.closed("c1", NotRun()), NotRun()),
        (ToolApprovalResponse.closed("c1", Interrupted()), Interrupted()),
    ],
)
def test_a_response_carries_its_outcome_and_renders_it(
    response: ToolApprovalResponse, outcome: CallOutcome | None
) -> None:
    assert response.outcome == outcome
    assert response.approved is (outcome is None)
    if outcome is not None:
        assert response.tool_message_text() == render_outcome(outcome)
    else:
        with pytest.raises(ValueError, match="'c1'"):
            response.tool_message_text()


def test_closed_with_a_rejection_or_expiry_is_that_decision() -> None:
    assert ToolApprovalResponse.closed("c1", Rejected("r", "U1")) == ToolApprovalResponse.reject(
        "c1", "r", decided_by="U1"
    )
    assert ToolApprovalResponse.closed("c1", Expired("5m")) == ToolApprovalResponse.expire(
        "c1", "5m"
    )
    assert ToolApprovalResponse.closed("c1", Cancelled()).decision == "closed"


def test_a_closed_decision_needs_its_outcome_and_only_it_has_one() -> None:
    with pytest.raises(ValueError, match="'c1'"):
        ToolApprovalResponse("c1", "closed")
    with pytest.raises(ValueError, match="'c2'"):
        ToolApprovalResponse("c2", "rejected", closed_with=Cancelled())
