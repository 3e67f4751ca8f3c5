"""What the store hands out: frozen pydantic rows, and the vocabularies of their states."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agent_core.batches import undecided_calls

__all__ = [
    "AuditEvent",
    "AuditRow",
    "CallStatus",
    "CancelOutcome",
    "DecisionOutcome",
    "EnqueueOutcome",
    "InboxItem",
    "InboxKind",
    "PendingApproval",
    "QueueItem",
    "QueueState",
    "RecoveredSession",
    "RunState",
    "SessionRow",
    "ToolCallRow",
    "batch_complete",
]

RunState = Literal["idle", "running", "awaiting_approval", "resuming", "failed"]
"""A session's run state (`docs/architecture.md`, "Run states"). Only the store's named
transitions change it: `begin_run`, `end_run`, `claim_resume`, `resume_started`, and the pause
(`record_pause`), cancel (`cancel_batch`), queue and recovery steps."""

CallStatus = Literal[
    "pending", "approved", "rejected", "expired", "executing", "done", "interrupted", "cancelled"
]
"""A ledger row's status. `pending` rows with `needs_approval=False` are held siblings;
`cancelled` rows never ran because someone cancelled the run while it waited for approval."""

QueueState = Literal["queued", "started", "done", "cancelled"]
"""A run-queue item's state: waiting for a slot, its run started, its run ended, or withdrawn."""

AuditEvent = Literal[
    "request",
    "decision",
    "refusal",
    "expiry",
    "execution_start",
    "execution_end",
    "interrupted",
    "cancel",
    "reminder",
    "resume_reclaimed",
]
"""The events the store itself writes; `Store.audit` accepts any other name too."""

_FROZEN = ConfigDict(frozen=True)


class SessionRow(BaseModel):
    """One Slack thread's agent session."""

    model_config = _FROZEN

    id: str
    team_id: str
    channel_id: str
    thread_ts: str
    state: RunState
    requester: str | None = None
    """Slack user id of whoever asked for the current (or last) run."""
    error: str | None = None
    """Why the last run failed, when `state` is `failed`."""
    batch_id: str | None = None
    """The latest paused batch; `Store.batch_calls` returns its rows."""
    created_at: datetime
    updated_at: datetime


class ToolCallRow(BaseModel):
    """One tool call in the ledger. `id` is opaque and random: it is what a Slack button carries."""

    model_config = _FROZEN

    id: str
    session_id: str
    batch_id: str | None
    """The paused batch the call belongs to; None for calls of a round that did not pause."""
    message_seq: int
    """Position in the history of the assistant message that asked for the call."""
    position: int
    """Index of the call among that message's calls (the model's order)."""
    call_id: str
    """The provider's id: unique within one assistant message, not globally."""
    name: str
    arguments: str
    """Canonical JSON (`agent_core.canonical_arguments`); a JSON string if the model sent junk."""
    digest: str
    needs_approval: bool
    status: CallStatus
    requested_by: str | None = None
    decided_by: str | None = None
    decided_team: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    result: str | None = None
    is_error: bool | None = None
    card_channel: str | None = None
    card_ts: str | None = None
    expires_at: datetime | None = None
    ttl: str | None = None
    """The time limit in words ("15m"), for the model's "Expired: ..." message."""
    approvals: tuple[str, ...] = ()
    """Distinct Slack user ids that approved so far (policies may need more than one)."""
    created_at: datetime
    reminded_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def tool(self) -> str:
        """The tool's name (an alias of `name`)."""
        return self.name

    def arguments_value(self) -> Any:
        """The canonical arguments parsed back (a dict, or the raw text the model sent)."""
        return json.loads(self.arguments)


class AuditRow(BaseModel):
    """One line of the append-only audit log."""

    model_config = _FROZEN

    id: int
    at: datetime
    event: str
    actor: str | None = None
    """Slack user id, or None for OpsGate itself (expiry, recovery)."""
    session_id: str | None = None
    call_id: str | None = None
    """The provider's call id; `details["ledger_id"]` names the ledger row."""
    details: dict[str, Any]


class DecisionOutcome(BaseModel):
    """What `Store.decide` did. `why` says why nothing was recorded (or what is missing)."""

    model_config = _FROZEN

    recorded: bool
    row: ToolCallRow
    """The row as it stands after the attempt."""
    why: str | None = None


class RecoveredSession(BaseModel):
    """A session that `Store.recover` repaired after a crash; the bot tells its thread."""

    model_config = _FROZEN

    session: SessionRow
    interrupted: list[ToolCallRow]
    """Calls that were running when OpsGate stopped: outcome unknown, never run again."""
    not_run: list[str] = []
    """Provider call ids that were answered "Not run" so the history stays valid."""


def batch_complete(rows: list[ToolCallRow]) -> bool:
    """Whether every gated call of a batch has a decision, so the batch may resume.

    A list without gated calls is not a paused batch, so it is never complete.
    """
    gated = [row.id for row in rows if row.needs_approval]
    decided = [row.id for row in rows if row.needs_approval and row.status != "pending"]
    return bool(gated) and not undecided_calls(gated, decided)


class QueueItem(BaseModel):
    """A message waiting (or having waited) in the run queue for a free slot in its channel."""

    model_config = _FROZEN

    id: int
    """Increasing: the queue is first come, first served within a channel."""
    session_id: str
    channel_id: str
    requester: str
    """Slack user id, or the bot id (B…) of an allow-listed integration."""
    text: str
    message_ts: str | None = None
    """The Slack message that asked, for progress reactions; None when there is none."""
    state: QueueState
    history_seq: int | None = None
    """Where the run's first message lands in the history; set when the item is started."""
    enqueued_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


InboxKind = Literal["message", "slash"]
"""What an inbox row holds: a message to the bot (mention, DM, thread reply) or `/opsgate`."""


class InboxItem(BaseModel):
    """Something Slack delivered and got a 200 for, saved before that 200 went out.

    It stays until processed (`Store.inbox_done`); recovery claims the rows left behind by a
    process that died (`Store.inbox_recover`), so nothing acknowledged is lost."""

    model_config = _FROZEN

    id: int
    kind: InboxKind
    payload: dict[str, Any]
    received_at: datetime


class EnqueueOutcome(BaseModel):
    """What `Store.enqueue` did: the new item, or None with the session that is busy."""

    model_config = _FROZEN

    item: QueueItem | None
    session: SessionRow
    waiting: QueueItem | None = None
    """When refused because the thread already has a message in the queue: that item."""


class CancelOutcome(BaseModel):
    """What `Store.cancel_batch` did. `rows` are the batch's rows after the attempt."""

    model_config = _FROZEN

    cancelled: bool
    rows: list[ToolCallRow]
    why: str | None = None
    """Why nothing was cancelled (the run resumed first, or the card is from an older batch)."""


class PendingApproval(BaseModel):
    """A gated call still waiting for decisions, with the session (channel, thread) it is in."""

    model_config = _FROZEN

    call: ToolCallRow
    session: SessionRow
