"""What the store hands out: frozen pydantic rows, and the vocabularies of their states."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agent_core.approvals import undecided_calls

from .quorum import QuorumState
from .reasons import CancelReason, DecisionReason
from .states import CallStatus, CardLock, InboxKind, QueueState, RunState

__all__ = [
    "AllowOutcome",
    "AllowanceGrant",
    "AllowanceRow",
    "AssistantThread",
    "AuditEvent",
    "AuditRow",
    "CancelOutcome",
    "DecisionOutcome",
    "EnqueueOutcome",
    "HomeViewer",
    "InboxItem",
    "PendingApproval",
    "QueueItem",
    "RecoveredSession",
    "SessionRow",
    "StoredInput",
    "StoredPreview",
    "ToolCallRow",
    "batch_complete",
]

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
    "edited",
    "allowance",
    "allowance_revoked",
    "resume_reclaimed",
    "run_requeued",
    "run_stopped",
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
    card_drawn: str | None = None
    """What the posted card shows (`bot.store.rules.card_state` when it was drawn); a card
    whose call has moved on is stale and is redrawn at start-up."""
    card_locked: CardLock | None = None
    """Why the card may not be approved (its full arguments could not be shown or attached)."""
    expires_at: datetime | None = None
    ttl: str | None = None
    """The time limit in words ("15m"), for the model's "Expired: ..." message."""
    approvals: tuple[str, ...] = ()
    """Distinct Slack user ids that approved so far (policies may need more than one)."""
    trace_id: str | None = None
    span_id: str | None = None
    """The paused run's span (hex ids), when traces are on: the resumed run links to it and
    the approval span joins its trace (`bot/observability/tracing.py`)."""
    created_at: datetime
    reminded_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    edited_arguments: str | None = None
    """Canonical JSON of the arguments a human changed the call to (`Store.edit_call`); what
    runs. `arguments` keeps the model's own."""
    edited_digest: str | None = None
    edited_by: str | None = None
    preview: str | None = None
    """The last run of the deciding rule's preview, as `StoredPreview` JSON (`preview_run`)."""

    escalation_step: int = 0
    """How many steps of its escalation ladder have passed (`bot.store.ladder`)."""
    reminders_sent: int = 0
    """How many reminder rounds its approvers were sent."""
    quorum: str | None = None
    """Its requirements and which approvals count toward each, as `QuorumState` JSON, once
    a decision stored them (`quorum_state`); None: one requirement every approval counts
    toward."""

    def quorum_state(self) -> QuorumState | None:
        return None if self.quorum is None else QuorumState.model_validate_json(self.quorum)

    def preview_run(self) -> StoredPreview | None:
        return None if self.preview is None else StoredPreview.model_validate_json(self.preview)

    @property
    def tool(self) -> str:
        """The tool's name (an alias of `name`)."""
        return self.name

    def arguments_value(self) -> Any:
        """The canonical arguments parsed back (a dict, or the raw text the model sent)."""
        return json.loads(self.arguments)

    def running_arguments(self) -> Any:
        """What runs once approved: the edited arguments if a human changed them, else the
        model's."""
        return json.loads(self.edited_arguments or self.arguments)

    @property
    def running_digest(self) -> str:
        """The digest a card shows: of the edited call once edited."""
        return self.edited_digest or self.digest


class StoredInput(BaseModel):
    """One file a preview read: its path as written, the absolute path read, what was there
    ("file", "directory", "absent", "unreadable") and the SHA-256 of its content."""

    model_config = _FROZEN

    path: str
    resolved: str
    state: str
    digest: str | None = None
    why: str | None = None


class StoredPreview(BaseModel):
    """One run of a call's preview (a rule's read-only command): what the card shows and the
    approval is bound to (`digest`, the SHA-256 of `output`, and of `inputs` when there are
    any: `bot.tools.preview.bound_digest`)."""

    model_config = _FROZEN

    argv: tuple[str, ...]
    """What ran (empty when a placeholder had no value and nothing could run)."""
    output: str
    exit_status: int | None
    failed: str | None
    """Why the card says "preview failed" (None: it did not fail)."""
    ran_at: datetime
    seconds: float
    digest: str
    tool: str | None = None
    """A custom or MCP tool's preview: the read-only tool that was called (`argv` is empty)."""
    arguments: str | None = None
    """Its arguments, canonical JSON."""
    inputs: tuple[StoredInput, ...] = ()
    """The files it read and their digests (`bot.tools.preview`): the run checks them
    first and refuses if any changed."""


# --- why the store changed nothing: typed, worded by the front ends ---------------------------


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
    seq: int
    """Gap-free position in the database's one audit chain, from 1 (`bot/store/chain.py`)."""
    prev_hash: str
    hash: str


class DecisionOutcome(BaseModel):
    """What `Store.decide` did. `why` says why nothing was recorded (or, recorded, what is
    missing: `MoreApprovalsNeeded`)."""

    model_config = _FROZEN

    recorded: bool
    row: ToolCallRow
    """The row as it stands after the attempt."""
    why: DecisionReason | None = None


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
    """Where the run's first message lands in the history; set when the item is started, and
    kept when a crash cut its run after the message was stored (`Store.requeue_interrupted`)."""
    enqueued_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    rerun: bool = False
    """Said by the claim that started it: its message is stored already (from `history_seq`),
    so the run answers the stored history rather than adding the message again."""


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
    why: CancelReason | None = None
    """Why nothing was cancelled (the run resumed first, or the card is from an older batch)."""


class PendingApproval(BaseModel):
    """A gated call still waiting for decisions, with the session (channel, thread) it is in."""

    model_config = _FROZEN

    call: ToolCallRow
    session: SessionRow


class AllowanceRow(BaseModel):
    """A time-boxed allowance: calls of `tool` in `channel_id` whose shape matches run without a
    card until `expires_at` (`bot.allowances` decides what matches; the store keeps `shape`
    as the JSON it was given)."""

    model_config = _FROZEN

    id: str
    channel_id: str
    tool: str
    shape: str
    """JSON: what a call must look like to run under this allowance."""
    label: str
    """The shape in words, as the granter confirmed it (e.g. "`kubectl get …`")."""
    granted_by: str
    ledger_id: str
    """The call whose card granted it."""
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None

    def active(self, now: datetime) -> bool:
        return self.revoked_at is None and now < self.expires_at


class AllowanceGrant(BaseModel):
    """The allowance an "Allow for" click asks for, stored with the approval
    (`Store.allow_call`): `shape` is JSON, `label` the shape in words."""

    model_config = _FROZEN

    channel_id: str
    tool: str
    shape: str
    label: str
    expires_at: datetime


class AllowOutcome(BaseModel):
    """What `Store.allow_call` did: the decision, and the allowance when the call is approved
    by it (None otherwise: nothing of the allowance was written)."""

    model_config = _FROZEN

    decision: DecisionOutcome
    allowance: AllowanceRow | None = None


class HomeViewer(BaseModel):
    """Someone who opened the Home tab lately, from workspace `team_id`."""

    model_config = _FROZEN

    user_id: str
    team_id: str | None = None


class AssistantThread(BaseModel):
    """A conversation in Slack's AI-app container (a DM thread): the channel its user looks
    at (None: none the bot acts in), the channel its last run started with, and when its first
    request named it (None: not yet)."""

    model_config = _FROZEN

    team_id: str
    channel_id: str
    thread_ts: str
    viewing_channel: str | None = None
    run_channel: str | None = None
    titled_at: datetime | None = None
    updated_at: datetime
