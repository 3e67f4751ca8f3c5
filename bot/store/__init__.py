"""The bot's durable state in one SQLite file: sessions, messages, the tool-call ledger, audit log.

Plain storage: it knows Slack ids only as strings and never imports a Slack library.
"""

from ._schema import SCHEMA_VERSION
from ._time import utc_now
from .errors import DatabaseLocked, SchemaTooNew, StoreError, UnknownCall, UnknownSession
from .models import (
    AuditEvent,
    AuditRow,
    CallStatus,
    CancelOutcome,
    DecisionOutcome,
    EnqueueOutcome,
    PendingApproval,
    QueueItem,
    QueueState,
    RecoveredSession,
    RunState,
    SessionRow,
    ToolCallRow,
    batch_complete,
)
from .sqlite import (
    CANCELLED_MESSAGE,
    CANCELLED_NOT_RUN_MESSAGE,
    INTERRUPTED_MESSAGE,
    NOT_RUN_MESSAGE,
    SEEN_EVENT_TTL,
    SQLiteStore,
)

__all__ = [  # noqa: RUF022 -- plain sorted() order, as every package here
    "AuditEvent",
    "AuditRow",
    "CANCELLED_MESSAGE",
    "CANCELLED_NOT_RUN_MESSAGE",
    "CallStatus",
    "CancelOutcome",
    "DatabaseLocked",
    "DecisionOutcome",
    "EnqueueOutcome",
    "INTERRUPTED_MESSAGE",
    "NOT_RUN_MESSAGE",
    "PendingApproval",
    "QueueItem",
    "QueueState",
    "RecoveredSession",
    "RunState",
    "SCHEMA_VERSION",
    "SEEN_EVENT_TTL",
    "SQLiteStore",
    "SchemaTooNew",
    "SessionRow",
    "StoreError",
    "ToolCallRow",
    "UnknownCall",
    "UnknownSession",
    "batch_complete",
    "utc_now",
]
