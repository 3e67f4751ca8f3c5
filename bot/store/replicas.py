"""What a store shared by several replicas adds to `Store`: leases, and wake-ups between them.

Only the PostgreSQL store has these (`Replicas`); SQLite is one process holding an exclusive
lock. Callers test for them with `isinstance(store, LeaseHolder)` / `isinstance(store,
WakeSource)`.

Each replica registers an instance and renews its lease with `heartbeat()`; recovery touches
only the work of instances whose lease lapsed (`recovery.py`). Wake-ups: triggers (schema
version 7 of PostgreSQL's line) NOTIFY on commit whenever a gated call is decided or expires, a
run is queued or put back, or a session frees its queue slot, whichever process made the
change; a replica LISTENs on a connection of its own and skips its own writes (it acts on those
itself). A missed wake-up costs only time: the periodic recovery pass looks at the same things.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from .core import StoreCore
from .errors import StoreError
from .rules import new_id
from .schema import AUDIT_CHANNEL, WAKE_CHANNEL

if TYPE_CHECKING:
    from .db.postgres import PostgresDb

__all__ = ["DEFAULT_LEASE", "LeaseHolder", "Replicas", "Wake", "WakeSource"]

logger = logging.getLogger("bot.store")

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
