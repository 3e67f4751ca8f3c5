"""The bot's durable state: sessions, messages, the tool-call ledger, the run queue, the audit log.

`Store` (in `base.py`) is the one interface; `SQLiteStore` (one file) and the PostgreSQL
backend (`bot.store.postgres`, for replicas) implement it, and `open_store` picks one from a
path or URL. Plain storage: it knows Slack ids only as strings and never imports a Slack library.
"""

from ._rules import HOME_VIEWERS_KEPT, SEEN_EVENT_TTL, card_state
from ._rules import already as already_reason
from ._schema import SCHEMA_VERSION
from ._time import utc_now
from .base import Store, open_store
from .errors import (
    DatabaseLocked,
    DatabaseUnwritable,
    InvalidTransition,
    SchemaTooNew,
    StoreError,
    UnknownCall,
    UnknownSession,
)
from .health import WriteHealth, require_writable
from .models import (
    AllowanceGrant,
    AllowanceRow,
    AllowOutcome,
    AuditEvent,
    AuditRow,
    CancelOutcome,
    DecisionOutcome,
    EnqueueOutcome,
    HomeViewer,
    InboxItem,
    PendingApproval,
    QueueItem,
    RecoveredSession,
    SessionRow,
    ToolCallRow,
    batch_complete,
)
from .reasons import (
    AlreadyApprovedByYou,
    AlreadyDecided,
    ArgumentsChanged,
    BatchMovedOn,
    CallExpired,
    CancelReason,
    DecisionReason,
    EditNotAllowed,
    MoreApprovalsNeeded,
    NeedsNoApproval,
    NoAllowanceOffered,
    NotWaiting,
    SelfAllow,
)
from .replicas import LeaseHolder, Wake, WakeSource
from .sqlite import SQLiteStore
from .states import CallStatus, CardLock, InboxKind, QueueState, RunState

__all__ = [  # noqa: RUF022 -- plain sorted() order, as every package here
    "AllowOutcome",
    "AllowanceGrant",
    "AllowanceRow",
    "AlreadyApprovedByYou",
    "AlreadyDecided",
    "ArgumentsChanged",
    "AuditEvent",
    "AuditRow",
    "BatchMovedOn",
    "CallExpired",
    "CallStatus",
    "CancelOutcome",
    "CancelReason",
    "CardLock",
    "DatabaseLocked",
    "DatabaseUnwritable",
    "DecisionOutcome",
    "DecisionReason",
    "EditNotAllowed",
    "EnqueueOutcome",
    "HOME_VIEWERS_KEPT",
    "HomeViewer",
    "InboxItem",
    "InboxKind",
    "InvalidTransition",
    "LeaseHolder",
    "MoreApprovalsNeeded",
    "NeedsNoApproval",
    "NoAllowanceOffered",
    "NotWaiting",
    "PendingApproval",
    "QueueItem",
    "QueueState",
    "RecoveredSession",
    "RunState",
    "SCHEMA_VERSION",
    "SEEN_EVENT_TTL",
    "SQLiteStore",
    "SchemaTooNew",
    "SelfAllow",
    "SessionRow",
    "Store",
    "StoreError",
    "ToolCallRow",
    "UnknownCall",
    "UnknownSession",
    "Wake",
    "WakeSource",
    "WriteHealth",
    "already_reason",
    "batch_complete",
    "card_state",
    "open_store",
    "require_writable",
    "utc_now",
]
