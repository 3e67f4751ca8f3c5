"""What the store decides and words, kept out of the SQL: refusals, card states, what the model
is told about a cancelled or interrupted batch, a resume's decisions, audit details, and which
approvals count toward which of a call's requirements (`tally`).

Pure functions of rows, so they can be read (and tested) without a database. Nothing here
touches a connection.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, get_args

from agent_core.approvals import ToolApprovalResponse
from agent_core.messages import (
    CallOutcome,
    Cancelled,
    ChatMessage,
    Expired,
    NotRun,
    Rejected,
    ToolCall,
)
from bot.words import format_duration

from .models import (
    AlreadyDecided,
    ArgumentsChanged,
    BatchMovedOn,
    CallExpired,
    CancelReason,
    DecisionReason,
    NeedsNoApproval,
    NotWaiting,
    Quorum,
    QuorumState,
    RunState,
    Shortfall,
    ToolCallRow,
    batch_complete,
)

__all__ = [
    "HOME_VIEWERS_KEPT",
    "PROBE_EVENT_ID",
    "RUN_STATES",
    "SEEN_EVENT_TTL",
    "Person",
    "Tally",
    "already",
    "arguments_changed",
    "cancel_outcome",
    "cancel_refusal",
    "card_state",
    "check_states",
    "counted",
    "counting",
    "edit_refusal",
    "edit_summary",
    "expiry_ttl",
    "interruption_audits",
    "new_id",
    "responses",
    "resume_never_began",
    "runs_again",
    "shortfalls",
    "start_audit",
    "tally",
]

SEEN_EVENT_TTL = timedelta(days=1)
"""How long a Slack event id is remembered; Slack retries within minutes."""

PROBE_EVENT_ID = "opsgate:readiness-probe"
"""The one `seen_events` row `probe_write` overwrites; no Slack event id looks like it."""

HOME_VIEWERS_KEPT = 500
"""How many recent Home tab openers the store remembers (the oldest are forgotten)."""

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


def already(row: ToolCallRow) -> DecisionReason:
    """Why a decision on a call that is no longer pending was not recorded: who won, and when."""
    if row.status == "expired":
        return CallExpired(row.expires_at or row.decided_at, row.ttl)
    if row.decided_by is None:
        return AlreadyDecided(row.status, (), row.decided_at)
    approved = row.status not in ("rejected", "cancelled")
    deciders = tuple(row.approvals) if approved and row.approvals else (row.decided_by,)
    return AlreadyDecided(row.status, deciders, row.decided_at)


def cancel_refusal(
    batch_id: str | None, current: str | None, state: str, moved: bool
) -> CancelReason | None:
    """Why a cancel ended nothing: the card is from an older batch, or the conditional update
    found the run no longer waiting (`moved`). None: it was cancelled."""
    if batch_id is not None and batch_id != current:
        return BatchMovedOn()
    if moved:
        check_states([state])
        return NotWaiting(state)  # type: ignore[arg-type]  # checked just above
    return None


def card_state(row: ToolCallRow) -> str:
    """What a card shows for `row`, as a short key: "pending:<approvals>" (buttons, progress)
    or the decided status the card shows. A card drawn with another key is stale."""
    match row.status:
        case "pending":
            return f"pending:{len(row.approvals)}"
        case "rejected" | "expired" | "cancelled":
            return row.status
        case _:
            return "approved"


def arguments_changed(row: ToolCallRow, shown: str | None) -> ArgumentsChanged | None:
    """A click from a card that showed digest `shown` while the pending call now runs other
    arguments (it was edited since): it must not count toward the edited call."""
    if shown is None or row.status != "pending" or shown == row.running_digest:
        return None
    return ArgumentsChanged(shown, row.running_digest)


def edit_refusal(row: ToolCallRow) -> DecisionReason | None:
    """Why an edit of `row` is not recorded (it is no longer pending), or None if it may be.
    Unlike an approval, someone who approved the old arguments may edit: the edit is a new call."""
    if not row.needs_approval:
        return NeedsNoApproval()
    if row.status != "pending":
        return already(row)
    return None


def edit_summary(
    row: ToolCallRow, arguments: str, digest: str, required_approvals: int, final: bool
) -> dict[str, Any]:
    """The audit details of an edit: both argument versions (the model's, and what runs now)."""
    return {
        "ledger_id": row.id,
        "tool": row.name,
        "original": json.loads(row.arguments),
        "previous": json.loads(row.edited_arguments) if row.edited_arguments else None,
        "edited": json.loads(arguments),
        "digest_before": row.running_digest,
        "digest": digest,
        "discarded_approvals": list(row.approvals),
        "approvals": 1,
        "required_approvals": required_approvals,
        "final": final,
    }


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
        if row.status == "approved" and row.edited_arguments is not None:
            edited_by = person(row.edited_by) if row.edited_by else decided_by
            answers.append(
                ToolApprovalResponse.approve(
                    row.call_id,
                    decided_by=edited_by,
                    edited_arguments=json.loads(row.edited_arguments),
                )
            )
        elif row.status in ("approved", "rejected"):
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
    which nothing ran yet (docs/architecture.md): then recovery puts it back to
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


def runs_again(state: str, tail: Sequence[ChatMessage], started: bool) -> bool:
    """Whether a queued run cut by a crash after it stored its message runs again from its
    stored history (docs/architecture.md, "The data path of one request", step 7): the
    session was still `running` (not paused for approval), no call of the run reached
    `executing` (a tool that may have run is never run twice: the thread is told instead),
    and the history from the run's message on (`tail`) ends where a model request comes next:
    that message, or a call answered without running. A stored answer is never asked for
    again: its ending is the outbox's to show."""
    return state == "running" and not started and bool(tail) and tail[-1].role in ("user", "tool")


def start_audit(
    name: str, ledger_id: str, digest: str, decided_by: str | None, refused: str | None
) -> tuple[str, dict[str, Any]]:
    """The audit event and details of a `start_tool_call`: the start, or the refusal of a call
    that is already past `approved` (it will not run twice)."""
    details: dict[str, Any] = {"ledger_id": ledger_id, "tool": name, "digest": digest}
    if refused is None:
        details["approved_by"] = decided_by
        return "execution_start", details
    details.update(action="execute", why=f"already {refused}", rule=None, policy_rule=None)
    return "refusal", details


def interruption_audits(
    previous_state: str, interrupted: Sequence[ToolCallRow], not_run: Any
) -> list[tuple[str | None, dict[str, Any]]]:
    """The `interrupted` audit rows of a session recovered after a crash, as (call id,
    details): one per call that was executing, or one for the session when none was."""
    if not interrupted:
        return [(None, {"previous_state": previous_state, "not_run": not_run})]
    return [
        (row.call_id, {"ledger_id": row.id, "tool": row.name, "not_run": not_run})
        for row in interrupted
    ]


# -- counting approvals toward a call's requirements ----------------------------------------
# An approval counts toward the requirements whose approvers the person belongs to (the one
# gate, `bot.approvals`, says which), so one approval never satisfies a part whose rule does not
# name that person. The decision is made from the stored approvals in the decision's own
# transaction (`decisions.decide_in`), so replicas racing clicks decide once. A call with one
# requirement counts every approval toward it: a row written before requirements were stored
# keeps its single requirement.


def counting(
    needs: Sequence[Quorum],
    approvals: Sequence[str],
    counts: dict[str, tuple[str, ...]],
) -> list[tuple[Quorum, tuple[str, ...]]]:
    """Each requirement with the approvers that count toward it. With one requirement every
    approval counts; with several, an approval counts toward the keys recorded for its
    approver, and one recorded without any (an older row) toward the first requirement only."""
    distinct = tuple(dict.fromkeys(approvals))
    if len(needs) == 1:
        return [(needs[0], distinct)]
    first = (needs[0].key,) if needs else ()
    return [
        (need, tuple(user for user in distinct if need.key in counts.get(user, first)))
        for need in needs
    ]


def counted(
    needs: Sequence[Quorum],
    approvals: Sequence[str],
    counts: dict[str, tuple[str, ...]],
) -> list[tuple[Quorum, int]]:
    """Each requirement with how many of `approvals` count toward it (`counting`)."""
    return [(need, len(users)) for need, users in counting(needs, approvals, counts)]


def shortfalls(
    needs: Sequence[Quorum], approvals: Sequence[str], counts: dict[str, tuple[str, ...]]
) -> tuple[Shortfall, ...]:
    """The requirements `approvals` do not meet yet (empty: the call is approved)."""
    return tuple(
        Shortfall(need.key, need.label, have, need.needed)
        for need, have in counted(needs, approvals, counts)
        if have < need.needed
    )


@dataclass(frozen=True, slots=True)
class Tally:
    """An approval added to a call: the approvals now, what the ledger stores, what is
    missing (empty: approved)."""

    approvals: tuple[str, ...]
    state: QuorumState
    missing: tuple[Shortfall, ...]


def tally(
    stored: QuorumState | None,
    approvals: Sequence[str],
    user: str | None,
    needs: Sequence[Quorum],
    counts_for: Sequence[str] | None,
) -> Tally:
    """`user`'s approval (None: none, e.g. an edit that counts nobody) added to `approvals`
    under `needs` (today's requirements, which replace the stored ones), counting toward
    `counts_for` (None: the first requirement)."""
    counts = dict(stored.counts) if stored is not None else {}
    kept = [a for a in approvals if a != user]
    if user is not None:
        kept.append(user)
        keys = tuple(counts_for) if counts_for is not None else (needs[0].key,)
        counts[user] = tuple(k for k in keys if any(n.key == k for n in needs))
    counts = {u: keys for u, keys in counts.items() if u in kept}
    state = QuorumState(needs=tuple(needs), counts=counts)
    return Tally(tuple(kept), state, shortfalls(needs, kept, counts))
