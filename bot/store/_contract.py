"""The second half of the `Store` contract: the run queue, the audit log and event dedupe, the
inbox, and crash recovery. `bot.store.base.Store` inherits it; see that module for the rules
every method here follows too (conditional writes, typed refusals, no driver exceptions).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from .models import AuditRow, EnqueueOutcome, InboxItem, QueueItem, RecoveredSession
from .states import InboxKind

__all__ = ["QueueAuditRecovery"]


class QueueAuditRecovery(Protocol):
    """The queue, audit, inbox and recovery part of `Store`."""

    # -- the run queue -------------------------------------------------------------------------

    async def enqueue(
        self, session_id: str, *, requester: str, text: str, message_ts: str | None = None
    ) -> EnqueueOutcome:
        """Queue a message unless its session is busy (run active or paused, or a message
        already queued); checked and written in one transaction."""
        ...

    async def claim_queued(self, channel_id: str, *, limit: int) -> QueueItem | None:
        """Start the channel's oldest queued item if fewer than `limit` of its sessions are
        running or resuming: conditional, in one transaction with the session's idle|failed ->
        running (requester set). Never exceeds the limit or starts an item twice."""
        ...

    async def release_queued(self, item_id: int) -> None:
        """Undo `claim_queued` for a run that could not start (shutting down)."""
        ...

    async def finish_queued(self, item_id: int) -> None:
        """The item's run ended (answered, failed or paused)."""
        ...

    async def cancel_queued(self, session_id: str, *, user_id: str) -> QueueItem | None:
        """Withdraw the thread's queued message (audited "cancel"); None if none waits."""
        ...

    async def queued_item(self, session_id: str) -> QueueItem | None: ...

    async def queue_position(self, item_id: int) -> int | None:
        """How many of the channel's items are queued ahead; None if no longer queued."""
        ...

    async def queue_items(
        self, *, channel_id: str | None = None, states: Collection[str] | None = None
    ) -> list[QueueItem]: ...

    async def queued_channels(self) -> list[str]:
        """Channels with messages waiting, the longest-waiting first."""
        ...

    async def requeue_interrupted(self) -> list[QueueItem]:
        """At start-up, before `recover`: started items whose run stored nothing go back to the
        queue (their sessions to idle); the others are marked done."""
        ...

    # -- audit and event dedupe ----------------------------------------------------------------

    async def audit(
        self,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one row to the audit log, which is append-only."""
        ...

    async def audit_rows(self, *, since: datetime | None = None) -> list[AuditRow]:
        """Audit rows in the order written, from `since` on if given."""
        ...

    async def first_sighting(self, event_id: str) -> bool:
        """True the first time an event id is seen, across all stores; forgets after
        `SEEN_EVENT_TTL`."""
        ...

    async def probe_write(self) -> None:
        """Write (and overwrite) one probe row: `/readyz` asks whether the database accepts
        writes. Raises `StoreError` (or the driver's error) when it does not."""
        ...

    # -- the inbox: what Slack was told we have (docs/architecture.md) ----------------------

    async def inbox_add(
        self, kind: InboxKind, payload: Mapping[str, Any], *, keys: Sequence[str] = ()
    ) -> int | None:
        """Save a delivery before it is acknowledged, owned by this store (its replica).

        `keys` are dedupe keys (event id, channel and ts): in the same transaction each is
        claimed as `first_sighting` does, and if any was seen before nothing is saved and the
        answer is None. A crash therefore never leaves a key claimed with nothing saved.
        Returns the row's id."""
        ...

    async def inbox_done(self, item_id: int) -> None:
        """The row was processed (its run queued, or it was answered); it is not recovered."""
        ...

    async def inbox_recover(self) -> list[InboxItem]:
        """At start-up: claim the unprocessed rows of processes that are gone (SQLite: every
        one, the file being exclusive; PostgreSQL: those of instances whose lease lapsed),
        oldest first. Conditional: each row is claimed by one store, however many recover."""
        ...

    # -- crash recovery --------------------------------------------------------------------------

    async def recover(self) -> list[RecoveredSession]:
        """Once at start-up: `executing` calls become `interrupted` (never run again), their
        batches are closed (interrupted / not run), and sessions left running or resuming
        become idle; paused sessions are left alone. Audited "interrupted"."""
        ...
