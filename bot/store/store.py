"""`Store`: the store's one implementation, composed of its concerns; the contract is on it.

`Store` is the contract: its methods' docstrings say what is conditional and what is audited,
and the contract tests in `tests/store/contract/` run it on every backend. It is composed of
one class per concern (`sessions`, `ledger`, `decisions`, `edits`, `freezes`, `queue`,
`recovery`, `audit`, ...), each standing on `StoreCore` alone (`core.py`: the database, the
clock, the migrations and the in-transaction steps several concerns take). `SQLiteStore`
(`sqlite.py`) and `PostgresStore` (`postgres.py`) only pick the database adapter (`db/`);
`open_store` (`backends.py`) picks one of them. Consumers that need less declare a small role
Protocol of their own (as `bot.slack.outbox`'s `OutboxStore` does).

Rows are the backend-neutral models of `bot.store.models`; errors are `bot.store.errors`
(never a driver's exception). A "conditional" write is a compare-and-set: of any number of
concurrent callers (tasks, processes or replicas) exactly one wins, and the others get False
or a refusal, never an error.
"""

from __future__ import annotations

from .assistant_threads import AssistantThreads
from .audit import Audit
from .budgets import SlackBudgets
from .decisions import Decisions
from .delegations import Delegations
from .edits import Edits
from .feedback import FeedbackVotes
from .freezes import Freezes
from .ladder import Escalations
from .ledger import Ledger
from .mcp_pins import McpPins
from .outbox import Outbox
from .plane import PlaneRows
from .queue import Queue
from .queue_notices import QueueNoticeRows
from .recorded import RecordedCalls
from .recovery import Recovery
from .sessions import Sessions
from .timelines import RunTimelines

__all__ = ["Store"]


class Store(
    Sessions,
    Ledger,
    Decisions,
    Edits,
    Freezes,
    Queue,
    Recovery,
    Audit,
    Outbox,
    QueueNoticeRows,
    AssistantThreads,
    FeedbackVotes,
    RunTimelines,
    RecordedCalls,
    McpPins,
    Escalations,
    Delegations,
    PlaneRows,
    SlackBudgets,
):
    """The bot's durable state: sessions, history, the tool-call ledger, the queue, the audit log.

    An async context manager: entering connects (and migrates), leaving disconnects. It is an
    `agent_core.SessionStore`. It never imports a Slack library and stores user ids plain; text
    for people names them with the `person` callable given to the backend's constructor.
    Build one through `SQLiteStore`, `PostgresStore` or `open_store`.
    """
