"""The names of the states a session, a ledger row, a queue item and an inbox row can be in."""

from __future__ import annotations

from typing import Literal

__all__ = ["CallStatus", "CardLock", "InboxKind", "QueueState", "RunState"]

RunState = Literal["idle", "running", "awaiting_approval", "resuming", "failed"]
"""A session's run state (`docs/architecture.md`, "Run states"). Only the store's named
transitions change it: `end_run`, `claim_resume`, `resume_started`, the pause (`record_pause`),
cancel (`cancel_batch`), queue (`claim_queued` starts a run) and recovery steps."""

CallStatus = Literal[
    "pending", "approved", "rejected", "expired", "executing", "done", "interrupted", "cancelled"
]
"""A ledger row's status. `pending` rows with `needs_approval=False` are held siblings;
`cancelled` rows never ran because someone cancelled the run while it waited for approval."""

CardLock = Literal["arguments_not_attached", "forbidden"]
"""Why a card may not be approved: `arguments_not_attached`, the arguments were too long to
show on the card and the file holding them could not be attached; `forbidden`, a policy rule
forbids the call (it never runs; the model is told the rule's justification)."""

QueueState = Literal["queued", "started", "done", "cancelled"]
"""A run-queue item's state: waiting for a slot, its run started, its run ended, or withdrawn."""

InboxKind = Literal["message", "slash", "request"]
"""What an inbox row holds: a message to the bot (mention, DM, thread reply) or `/opsgate`."""
