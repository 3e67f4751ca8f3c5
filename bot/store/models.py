"""What the store hands out: frozen pydantic rows, and the vocabularies of their states."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "AuditEvent",
    "AuditRow",
    "CallStatus",
    "DecisionOutcome",
    "RecoveredSession",
    "RunState",
    "SessionRow",
    "ToolCallRow",
    "batch_complete",
]

RunState = Literal["idle", "running", "awaiting_approval", "resuming", "failed"]
"""A session's run state (DESIGN.md "Run states")."""

CallStatus = Literal[
    "pending", "approved", "rejected", "expired", "executing", "done", "interrupted"
]
"""A ledger row's status. `pending` rows with `needs_approval=False` are held siblings."""

AuditEvent = Literal[
    "request",
    "decision",
    "refusal",
    "expiry",
    "execution_start",
    "execution_end",
    "interrupted",
]
"""The events the store itself writes; `SQLiteStore.audit` accepts any other name too."""

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
    """The latest paused batch; `SQLiteStore.batch_calls` returns its rows."""
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
    """What `SQLiteStore.decide` did. `why` says why nothing was recorded (or what is missing)."""

    model_config = _FROZEN

    recorded: bool
    row: ToolCallRow
    """The row as it stands after the attempt."""
    why: str | None = None


class RecoveredSession(BaseModel):
    """A session that `SQLiteStore.recover` repaired after a crash; the bot tells its thread."""

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
    gated = [row for row in rows if row.needs_approval]
    return bool(gated) and all(row.status != "pending" for row in gated)
