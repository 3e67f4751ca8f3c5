"""`Store`: the store's one implementation, composed of its concerns; the contract is on it.
Also the stores one builds (`SQLiteStore`, `PostgresStore`), `open_store` that picks one, and
the write health the bot keeps of whichever it opened.

`Store` is the contract: its methods' docstrings say what is conditional and what is audited,
and the contract tests in `tests/store/contract/` run it on every backend. It is composed of
one class per concern (`sessions`, `ledger`, `decisions`, `edits`, `freezes`, `queue`,
`recovery`, `audit`, ...), each standing on `StoreCore` alone (`core.py`: the database, the
clock, the migrations and the in-transaction steps several concerns take). `SQLiteStore` and
`PostgresStore` only pick the database adapter (`sqlite.py`, `postgres.py`, over the seam
`db.py`); the PostgreSQL one adds what replicas need (`Replicas`: leases, LISTEN/NOTIFY
wake-ups), and imports its adapter (and so asyncpg) only when it is built, so an SQLite
deployment never loads the driver. Consumers that need less declare a small role Protocol of
their own (as `bot.slack.outbox`'s `OutboxStore` does).

Rows are the backend-neutral models of `bot.store.models`; errors are `bot.store.errors`
(never a driver's exception). A "conditional" write is a compare-and-set: of any number of
concurrent callers (tasks, processes or replicas) exactly one wins, and the others get False
or a refusal, never an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import aiosqlite
from pydantic import BaseModel, ValidationError

from bot.settings import SCHEMES, DatabaseURL, url_scheme

from .audit import Audit
from .core import StoreCore
from .db import utc_now
from .decisions import Decisions
from .edits import Edits
from .errors import DatabaseUnwritable, StoreError
from .freezes import Freezes
from .ladder import Delegations, Escalations
from .ledger import Ledger, RecordedCalls
from .mcp_pins import McpPins
from .outbox import Outbox, SlackBudgets
from .plane import PlaneRows
from .queue import Queue
from .queue_notices import QueueNoticeRows
from .recovery import Recovery
from .rules import Person, new_id
from .schema import AUDIT_CHANNEL, SCHEMA_VERSION, WAKE_CHANNEL
from .sessions import AssistantThreads, FeedbackVotes, RunTimelines, Sessions
from .sqlite import SQLiteDb

if TYPE_CHECKING:
    from .postgres import PostgresDb

__all__ = [
    "DEFAULT_LEASE",
    "LeaseHolder",
    "PostgresStore",
    "Replicas",
    "SQLiteStore",
    "Store",
    "Wake",
    "WakeSource",
    "WriteHealth",
    "open_store",
    "require_writable",
]

logger = logging.getLogger("bot.store")


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


# -- what a store shared by several replicas adds: leases, and wake-ups between them -----------
# Only the PostgreSQL store has these (`Replicas`); SQLite is one process holding an exclusive
# lock. Callers test for them with `isinstance(store, LeaseHolder)` / `isinstance(store,
# WakeSource)`. Each replica registers an instance and renews its lease with `heartbeat()`;
# recovery touches only the work of instances whose lease lapsed (`recovery.py`). Wake-ups:
# triggers (schema version 7 of PostgreSQL's line) NOTIFY on commit whenever a gated call is
# decided or expires, a run is queued or put back, or a session frees its queue slot, whichever
# process made the change; a replica LISTENs on a connection of its own and skips its own writes
# (it acts on those itself). A missed wake-up costs only time: the periodic recovery pass looks
# at the same things.

DEFAULT_LEASE = timedelta(seconds=20)
"""Well under a minute, so a survivor tells the thread about an interrupted call promptly."""

_CLOSE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Wake:
    """Another replica changed something this one may have to act on.

    `resume`: a gated call of session `key` was decided or expired (its batch may now resume).
    `queue`: channel `key` may have a free slot or a new queued run.
    """

    kind: Literal["resume", "queue"]
    key: str


@runtime_checkable
class LeaseHolder(Protocol):
    """A store on which this process holds a replica lease (see docs/architecture.md)."""

    async def register_instance(
        self, *, lease: timedelta = ..., name: str | None = None
    ) -> str: ...

    async def heartbeat(self) -> bool: ...

    async def release(self) -> None: ...


@runtime_checkable
class WakeSource(Protocol):
    """A store that tells each replica what the others changed (PostgreSQL: LISTEN/NOTIFY)."""

    def wakeups(self) -> AbstractAsyncContextManager[AsyncIterator[Wake]]:
        """Wake-ups caused by other processes, while the context is open; the iterator raises
        `StoreError` if the connection is lost (listen again: nothing queues up meanwhile)."""
        ...


class _Payload(BaseModel, frozen=True):
    kind: Literal["resume", "queue"]
    key: str
    origin: str = ""


class Replicas(StoreCore):
    """Leases and wake-ups, over the PostgreSQL adapter `_pg` (the same object as `_db`)."""

    _pg: PostgresDb

    @property
    def instance_id(self) -> str | None:
        """This store's registered instance, if any."""
        return self._instance_id

    async def register_instance(
        self, *, lease: timedelta = DEFAULT_LEASE, name: str | None = None
    ) -> str:
        """Register this process as a replica holding a lease; the store then notes it on the
        work it starts. Returns the instance id."""
        if lease <= timedelta(0):
            raise ValueError(f"lease must be positive, not {lease!r}")
        if self._instance_id is not None:
            raise StoreError(f"store {self._db.name!r} already registered {self._instance_id!r}")
        instance_id = new_id()
        async with self._db.transaction("register_instance") as tx:
            await tx.execute(
                "INSERT INTO instances (id, name, started_at, heartbeat_at, lease_seconds) "
                "VALUES (:id, :name, :now, :now, :lease)",
                {
                    "id": instance_id,
                    "name": name,
                    "now": self._now(),
                    "lease": lease.total_seconds(),
                },
            )
        self._instance_id = instance_id
        return instance_id

    async def heartbeat(self) -> bool:
        """Renew the lease; False if the instance is gone (released, or never registered)."""
        if self._instance_id is None:
            return False
        async with self._db.transaction("heartbeat") as tx:
            touched = await tx.execute(
                "UPDATE instances SET heartbeat_at = :now WHERE id = :id",
                {"now": self._now(), "id": self._instance_id},
            )
        return touched == 1

    async def release(self) -> None:
        """Give the lease up (after in-flight work finished): survivors may recover at once."""
        instance_id, self._instance_id = self._instance_id, None
        if instance_id is None:
            return
        async with self._db.transaction("release") as tx:
            await tx.execute("DELETE FROM instances WHERE id = :id", {"id": instance_id})

    # -- wake-ups ----------------------------------------------------------------------------------

    def wakeups(self) -> AbstractAsyncContextManager[AsyncIterator[Wake]]:
        """Wake-ups caused by other processes while the context is open (see `WakeSource`)."""
        return self._listening()

    @contextlib.asynccontextmanager
    async def _listening(self) -> AsyncIterator[AsyncIterator[Wake]]:
        import asyncpg  # only a PostgreSQL store listens; SQLite never loads the driver

        heard: asyncio.Queue[Wake | None] = asyncio.Queue()

        def on_notify(conn: Any, pid: int, channel: str, payload: str) -> None:
            wake = self._wake(payload)
            if wake is not None:
                heard.put_nowait(wake)

        def on_lost(conn: Any) -> None:
            heard.put_nowait(None)

        try:
            conn = await asyncpg.connect(
                self._pg.url, server_settings={"application_name": f"{self._pg.origin} listen"}
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"cannot listen for wake-ups on {self._pg.name!r}: {exc}") from exc
        try:
            conn.add_termination_listener(on_lost)
            await conn.add_listener(WAKE_CHANNEL, on_notify)
            yield self._drain(heard)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), _CLOSE_TIMEOUT)

    def audit_appended(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set whenever any process appends an audit row (or the listening
        connection is lost: look again), while the context is open; `opsgate audit --follow`
        clears it and reads."""
        return self._audit_listening()

    @contextlib.asynccontextmanager
    async def _audit_listening(self) -> AsyncIterator[asyncio.Event]:
        import asyncpg

        appended = asyncio.Event()
        try:
            conn = await asyncpg.connect(
                self._pg.url, server_settings={"application_name": f"{self._pg.origin} follow"}
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"cannot listen for audit rows on {self._pg.name!r}: {exc}") from exc
        try:
            conn.add_termination_listener(lambda _conn: appended.set())
            await conn.add_listener(AUDIT_CHANNEL, lambda *_: appended.set())
            yield appended
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), _CLOSE_TIMEOUT)

    async def _drain(self, heard: asyncio.Queue[Wake | None]) -> AsyncIterator[Wake]:
        while True:
            wake = await heard.get()
            if wake is None:
                raise StoreError(f"lost the wake-up connection to {self._pg.name!r}")
            yield wake

    def _wake(self, payload: str) -> Wake | None:
        """The wake-up a notification means; None for our own or an unreadable one."""
        try:
            parsed = _Payload.model_validate(json.loads(payload))
        except (ValueError, ValidationError):
            logger.warning("ignored an unreadable wake-up on %s", WAKE_CHANNEL)
            return None
        if parsed.origin == self._pg.origin:
            return None
        return Wake(parsed.kind, parsed.key)


# -- the two stores ----------------------------------------------------------------------------
# `SQLiteStore` picks the SQLite adapter (`sqlite.py`: the exclusive lock, the one
# connection, the cancel-safe `BEGIN IMMEDIATE`); `PostgresStore` the PostgreSQL one
# (`postgres.py`: the pool, row and advisory locks), imported when the store is built.


class SQLiteStore(Store):
    """The bot's durable store in one SQLite file; a `bot.store.Store` (and so an
    `agent_core.SessionStore`). Use it as an async context manager.

    `exclusive=True` is for the one process that serves the bot: entering also takes an
    exclusive lock on the sidecar file `<db>.lock`, held until the store closes, and raises
    `DatabaseLocked` if another process holds it. Readers such as `opsgate audit` leave it
    False and open alongside. `person` names a user id in text for people and the model
    (refusals, "rejected by ..."); the store keeps ids plain, and the bot passes its mention
    function. `chained=False` writes audit rows without the chain: only for the benchmark's
    floor (`bench/audit_chain.py`), on a database whose chain trigger it dropped.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        exclusive: bool = False,
        clock: Callable[[], datetime] = utc_now,
        busy_timeout: float = 30.0,
        person: Person = str,
        chained: bool = True,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self._file = SQLiteDb(path, exclusive=exclusive, busy_timeout=busy_timeout)
        super().__init__(self._file, clock=clock, person=person, chained=chained, wake=wake)

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def exclusive(self) -> bool:
        return self._file.exclusive

    @property
    def lock_path(self) -> Path:
        return self._file.lock_path

    def __repr__(self) -> str:
        mode = ", exclusive=True" if self.exclusive else ""
        return f"SQLiteStore({str(self.path)!r}{mode})"

    def _connection(self) -> aiosqlite.Connection:
        """The one connection (tests read PRAGMAs and change counts through it)."""
        return self._file.connection()


class PostgresStore(Store, Replicas):
    """The bot's durable store on PostgreSQL; the same public API as `SQLiteStore`.

    Use it as an async context manager: entering opens an asyncpg pool and applies pending
    migrations (safely when replicas start together; `migrate=False` skips that); leaving
    closes the pool. There is no exclusive lock: replicas share the database, and
    `register_instance` / `heartbeat` / `release` hold the lease that tells survivors whose
    work to recover; `wakeups()` tells this replica what the others changed. `chained=False`:
    as `SQLiteStore`'s, for the benchmark's floor only.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        min_size: int = 1,
        max_size: int = 10,
        migrate: bool = True,
        person: Person = str,
        chained: bool = True,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        try:
            from .postgres import PostgresDb
        except ModuleNotFoundError as exc:  # the driver is a dependency, but may be left out
            raise StoreError(
                f"cannot open a PostgreSQL store: its driver is not available ({exc})"
            ) from exc
        # This store's `application_name`: wake-ups name the store whose write caused them.
        origin = f"opsgate {secrets.token_hex(6)}"
        self._pg = PostgresDb(url, origin=origin, min_size=min_size, max_size=max_size)
        super().__init__(
            self._pg, clock=clock, person=person, chained=chained, migrate=migrate, wake=wake
        )

    @property
    def url(self) -> str:
        return self._pg.url

    @property
    def name(self) -> str:
        """The URL without its password, fit for messages and logs."""
        return self._pg.name

    def __repr__(self) -> str:
        return f"PostgresStore({self.name!r})"

    async def schema_version(self) -> int:
        """The database's schema version (0 when never migrated); refuses a newer one."""
        async with self._db.reading("schema_version") as tx:
            return await self._db.version(tx, SCHEMA_VERSION)

    async def migrate(self) -> int:
        """Apply the missing migrations (idempotent; safe when replicas start together)."""
        return await self._migrate()


# -- open_store: the store a setting names, SQLite for a file path and PostgreSQL for a URL ----


def open_store(target: str | Path | DatabaseURL, *, exclusive: bool = False, **kw: Any) -> Store:
    """The store `OPSGATE_DB` names (not yet entered): a file path gives `SQLiteStore`, a
    `postgresql://` or `postgres://` URL (or `DatabaseURL`) `PostgresStore`, its driver imported
    only then. `exclusive` takes SQLite's lock (the bot does: a second bot on one file would
    "recover" the first one's running calls); PostgreSQL has none, replicas hold leases
    instead. Other keywords go to the store's constructor (`clock`, `person`, ...)."""
    text = target.get_secret_value() if isinstance(target, DatabaseURL) else str(target)
    scheme = None if isinstance(target, Path) else url_scheme(text)
    if scheme is None:
        return SQLiteStore(target, exclusive=exclusive, **kw)  # type: ignore[arg-type]
    if scheme not in SCHEMES:
        raise StoreError(
            f"no store backend for URL scheme {scheme!r}; use a file path or a postgresql:// URL"
        )
    return PostgresStore(text, **kw)


# -- whether the database takes writes, as the bot last found it: read by the health check -----
# The bot refuses to start on a database it cannot write; at run time a write can still fail (a
# full disk, a file made read-only). Whoever catches such a failure records it here and tells
# the person whose message or click was lost; the next write that succeeds clears it.


@dataclass
class WriteHealth:
    """`writable` is False from a failed write until the next one that succeeds; `reason` says
    what failed (for `/readyz`)."""

    writable: bool = True
    reason: str | None = None

    def failed(self, what: str, exc: BaseException) -> None:
        if self.writable:
            logger.error("the database refused a write (%s): %s", what, exc)
        self.writable = False
        self.reason = f"{what}: {exc}"

    def succeeded(self) -> None:
        if not self.writable:
            logger.info("the database takes writes again")
        self.writable, self.reason = True, None


async def require_writable(store: Store) -> None:
    """Start-up's check: one write (`Store.probe_write`), else `DatabaseUnwritable`."""
    try:
        await store.probe_write()
    except DatabaseUnwritable:
        raise
    except Exception as exc:  # a StoreError, or a driver's error the backend let through
        raise DatabaseUnwritable(exc) from exc
