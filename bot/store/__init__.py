"""The bot's durable state: sessions, messages, the tool-call ledger, the run queue, the audit log.

`Store` (in `store.py`) is the one implementation and its contract, composed of one class
per concern (`sessions`, `ledger`, `decisions`, `edits`, `queue`, `recovery`, `audit`, ...),
each on `StoreCore` alone, over a thin database seam (`db/`) with two adapters: `SQLiteStore`
(one file) and `PostgresStore` (`bot.store.postgres`, for replicas); `open_store` picks one
from a path or URL. A decision takes the policy's `Ruling` (`quorum.py`). Plain storage:
it knows Slack ids only as strings and never imports a Slack library.
"""

from .backends import open_store
from .budgets import BudgetShape, BudgetState
from .db import utc_now
from .delegations import Delegation
from .errors import (
    DatabaseLocked,
    DatabaseReplaced,
    DatabaseUnwritable,
    InvalidTransition,
    LateResult,
    SchemaTooNew,
    StoreError,
    UnknownCall,
    UnknownSession,
)
from .feedback import Vote, VoteValue
from .freezes import BreakGlassRow, FreezeRow, GlassUse
from .health import WriteHealth, require_writable
from .ladder import Claimed, LadderClaim
from .mcp_pins import ListedTool, McpPin
from .models import (
    AllowanceGrant,
    AllowanceRow,
    AllowOutcome,
    AssistantThread,
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
    StoredInput,
    StoredPreview,
    ToolCallRow,
    batch_complete,
)
from .outbox import (
    CARD_REDRAW,
    REDRAW_PRIORITY,
    OutboxEntry,
    OutboxRow,
    OutboxStats,
    OutboxWake,
    card_redraw,
)
from .plane import PlaneRequest, PlaneState
from .queue_notices import QUEUE_NOTICE, QUEUE_PRIORITY, QueueNotice, queue_redraw
from .quorum import Quorum, QuorumState, Ruling, Shortfall
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
    PreviewChanged,
    SelfAllow,
)
from .recorded import RecordedCall
from .replicas import LeaseHolder, Wake, WakeSource
from .rules import HOME_VIEWERS_KEPT, SEEN_EVENT_TTL, card_state
from .rules import already as already_reason
from .schema import SCHEMA_VERSION
from .sqlite import SQLiteStore
from .states import CallStatus, CardLock, InboxKind, QueueState, RunState
from .store import Store
from .timelines import StoredTimeline

__all__ = [  # noqa: RUF022 -- plain sorted() order, as every package here
    "AllowOutcome",
    "AllowanceGrant",
    "AllowanceRow",
    "AlreadyApprovedByYou",
    "AlreadyDecided",
    "ArgumentsChanged",
    "AssistantThread",
    "AuditEvent",
    "AuditRow",
    "BatchMovedOn",
    "BreakGlassRow",
    "BudgetShape",
    "BudgetState",
    "CARD_REDRAW",
    "CallExpired",
    "CallStatus",
    "CancelOutcome",
    "CancelReason",
    "CardLock",
    "Claimed",
    "DatabaseLocked",
    "DatabaseReplaced",
    "DatabaseUnwritable",
    "DecisionOutcome",
    "DecisionReason",
    "Delegation",
    "EditNotAllowed",
    "EnqueueOutcome",
    "FreezeRow",
    "GlassUse",
    "HOME_VIEWERS_KEPT",
    "HomeViewer",
    "InboxItem",
    "InboxKind",
    "InvalidTransition",
    "LadderClaim",
    "LateResult",
    "LeaseHolder",
    "ListedTool",
    "McpPin",
    "MoreApprovalsNeeded",
    "NeedsNoApproval",
    "NoAllowanceOffered",
    "NotWaiting",
    "OutboxEntry",
    "OutboxRow",
    "OutboxStats",
    "OutboxWake",
    "PendingApproval",
    "PlaneRequest",
    "PlaneState",
    "PreviewChanged",
    "QUEUE_NOTICE",
    "QUEUE_PRIORITY",
    "QueueItem",
    "QueueNotice",
    "QueueState",
    "Quorum",
    "QuorumState",
    "REDRAW_PRIORITY",
    "RecordedCall",
    "RecoveredSession",
    "Ruling",
    "RunState",
    "SCHEMA_VERSION",
    "SEEN_EVENT_TTL",
    "SQLiteStore",
    "SchemaTooNew",
    "SelfAllow",
    "SessionRow",
    "Shortfall",
    "Store",
    "StoreError",
    "StoredInput",
    "StoredPreview",
    "StoredTimeline",
    "ToolCallRow",
    "UnknownCall",
    "UnknownSession",
    "Vote",
    "VoteValue",
    "Wake",
    "WakeSource",
    "WriteHealth",
    "already_reason",
    "batch_complete",
    "card_redraw",
    "card_state",
    "open_store",
    "queue_redraw",
    "require_writable",
    "utc_now",
]
