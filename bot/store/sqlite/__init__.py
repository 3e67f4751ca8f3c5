"""`SQLiteStore`: the `Store` interface over one SQLite file (WAL, `synchronous=FULL`).

One class composed of per-concern parts that share one connection and its transaction
machinery (`_connection.py`): sessions and run states, the agent's execution marks, the
ledger's decisions, edits and allowances, cancelling, the run queue, the audit log and crash
recovery. The contract of every public method is documented once, on `bot.store.Store`.
"""

from __future__ import annotations

from ._audit import AuditPart
from ._cancel import CancelPart
from ._edits import EditsPart
from ._execution import ExecutionPart
from ._home import HomePart
from ._inbox import InboxPart
from ._ledger import LedgerPart
from ._queue import QueuePart
from ._recovery import RecoveryPart
from ._sessions import SessionsPart
from ._summaries import SummariesPart

__all__ = ["SQLiteStore"]


class SQLiteStore(
    SessionsPart,
    SummariesPart,
    ExecutionPart,
    EditsPart,
    LedgerPart,
    CancelPart,
    QueuePart,
    AuditPart,
    InboxPart,
    HomePart,
    RecoveryPart,
):
    """The bot's durable store in one SQLite file; implements `bot.store.Store` (and so
    `agent_core.SessionStore`).

    `SQLiteStore(path, *, exclusive=False, clock=utc_now, busy_timeout=30.0, person=str)`:
    see `SQLiteConnection` for what each keyword is for. Use it as an async context manager.
    """
