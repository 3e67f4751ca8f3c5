"""The bot's durable state: sessions, messages, the tool-call ledger, the run queue, the audit log.

`Store` (in `base.py`) is the one interface; `SQLiteStore` (one file) and the PostgreSQL
backend (`bot.store.postgres`, for replicas) implement it, and `open_store` picks one from a
path or URL. Plain storage: it knows Slack ids only as strings and never imports a Slack library.
"""

from ._rules import SEEN_EVENT_TTL
from ._schema import SCHEMA_VERSION
from ._time import utc_now
from .base import Store, open_store
from .errors import (
    DatabaseLocked,
    InvalidTransition,
    SchemaTooNew,
    StoreError,
    UnknownCall,
    UnknownSession,
)
from .health import WriteHealth
from .models import (
    AuditEvent,
    AuditRow,
    CallStatus,
    CancelOutcome,
    DecisionOutcome,
    EnqueueOutcome,
    InboxItem,
    InboxKind,
    PendingApproval,
    QueueItem,
    QueueState,
    RecoveredSession,
    RunState,
    SessionRow,
    ToolCallRow,
    batch_complete,
)
from .sqlite import SQLiteStore

__all__ = [  # noqa: RUF022 -- plain sorted() order, as every package here
    "AuditEvent",
    "AuditRow",
    "CallStatus",
    "CancelOutcome",
    "DatabaseLocked",
    "DecisionOutcome",
    "EnqueueOutcome",
    "InboxItem",
    "InboxKind",
    "InvalidTransition",
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
    "Store",
    "StoreError",
    "ToolCallRow",
    "UnknownCall",
    "UnknownSession",
    "WriteHealth",
    "batch_complete",
    "open_store",
    "utc_now",
]
