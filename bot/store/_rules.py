"""What every store backend decides and words the same way, kept out of the SQL.

A second backend (PostgreSQL) imports these rather than re-deriving them, so a refusal, a
cancelled call's tool message or a resume's decisions read the same whichever database holds
the rows. Nothing here touches a connection.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Iterable
from datetime import datetime, timedelta
from typing import get_args

from agent_core.approvals import ToolApprovalResponse
from agent_core.messages import ChatMessage, ToolCall
from agent_core.outcomes import CallOutcome, Cancelled, Expired, NotRun, Rejected
from bot._duration import format_duration

from .models import RunState, ToolCallRow, batch_complete

__all__ = [
    "RUN_STATES",
    "SEEN_EVENT_TTL",
    "Person",
    "already",
    "cancel_outcome",
    "check_states",
    "expiry_ttl",
    "new_id",
    "responses",
    "resume_never_began",
]

SEEN_EVENT_TTL = timedelta(days=1)
"""How long a Slack event id is remembered; Slack retries within minutes."""

RUN_STATES: frozenset[str] = frozenset(get_args(RunState))

Person = Callable[[str], str]
"""How a user id is named in text meant for people and the model (the bot passes a mention)."""


def new_id() -> str:
    """Opaque and unguessable: ledger ids travel in Slack buttons."""
    return secrets.token_hex(16)


def check_states(states: Collection[str]) -> None:
    unknown = sorted(set(states) - RUN_STATES)
    if unknown:
        raise ValueError(
            f"unknown run state(s) {unknown!r}; expected one of {sorted(RUN_STATES)!r}"
        )


def _when(moment: datetime | None) -> str:
    return "an unknown time" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def already(row: ToolCallRow, person: Person) -> str:
    """Why a decision on a call that is no longer pending was not recorded: who won, and when."""
    if row.status == "expired":
        within = f" (no decision within {row.ttl})" if row.ttl else ""
        return f"expired at {_when(row.expires_at or row.decided_at)}{within}; it was not run"
    if row.decided_by is None:
        return f"already {row.status}"
    if row.status == "cancelled":
        return f"already cancelled by {person(row.decided_by)} at {_when(row.decided_at)}"
    verb = "rejected" if row.status == "rejected" else "approved"
    deciders = list(row.approvals) if verb == "approved" and row.approvals else [row.decided_by]
    who = " and ".join(person(u) for u in deciders)
    return f"already {verb} by {who} at {_when(row.decided_at)}"


def expiry_ttl(row: ToolCallRow) -> str | None:
    """The time limit in words for an expiring row; measured if `set_expiry` gave none."""
    if row.ttl is None and row.expires_at is not None:
        return format_duration(row.expires_at - row.created_at, approximate=True)
    return row.ttl


def cancel_outcome(
    rows: dict[str, ToolCallRow], by: str, person: Person
) -> Callable[[ToolCall], CallOutcome]:
    """What the model is told about each call of a cancelled batch (`rows` by provider call id,
    as they were before the cancel; `by` already spelled by `person`)."""

    def outcome(call: ToolCall) -> CallOutcome:
        row = rows.get(call.id)
        if row is None or not row.needs_approval or row.status == "approved":
            return NotRun(cancelled_by=by)
        if row.status == "rejected":
            decided_by = person(row.decided_by) if row.decided_by else None
            return Rejected(row.reason, by=decided_by)
        if row.status == "expired":
            return Expired(row.ttl or "the time limit")
        return Cancelled(by=by)

    return outcome


def responses(rows: Iterable[ToolCallRow], person: Person) -> list[ToolApprovalResponse]:
    """The decisions of a batch's gated calls, as the resume needs them (undecided ones left
    out: the agent refuses to resume without them)."""
    answers: list[ToolApprovalResponse] = []
    for row in rows:
        if not row.needs_approval:
            continue
        decided_by = person(row.decided_by) if row.decided_by else None
        if row.status in ("approved", "rejected"):
            answers.append(
                ToolApprovalResponse(
                    row.call_id, row.status, reason=row.reason, decided_by=decided_by
                )
            )
        elif row.status == "expired":
            answers.append(ToolApprovalResponse.expire(row.call_id, row.ttl or "the time limit"))
    return answers


_STARTED = frozenset({"executing", "done", "interrupted"})


def resume_never_began(rows: list[ToolCallRow], tail: list[ChatMessage], seq: int | None) -> bool:
    """Whether a session left `resuming` or `running` by a crash holds a decided batch of
    which nothing ran yet (DESIGN.md semantics 9): then recovery puts it back to
    `awaiting_approval`, and the resume is claimed again, once, and runs the approved calls.

    `rows` are the latest batch's ledger rows, `tail` the history from the last tool-call
    message (at `seq`) on. The batch must be that message's and still unanswered (no tool
    message after it, nothing appended since), fully decided, and no call of it started.
    """
    return (
        seq is not None
        and batch_complete(rows)
        and all(row.message_seq == seq and row.status not in _STARTED for row in rows)
        and len(tail) == 1
    )
