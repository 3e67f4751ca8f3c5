"""`PostgresStore`: the store on a PostgreSQL database several replicas share (asyncpg).

The operations are the store's one implementation (`Store`); this module picks the PostgreSQL
adapter (`db/postgres.py`: the pool, row and advisory locks) and adds what replicas need
(`replicas.py`: leases, LISTEN/NOTIFY wake-ups). Imported only when a `postgresql://` URL is
opened, so an SQLite deployment never loads the driver.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime

from bot.settings import redact_url as redact

from .db import utc_now
from .db.postgres import PostgresDb
from .errors import PostgresSchemaTooNew
from .replicas import DEFAULT_LEASE, Replicas
from .rules import Person
from .schema import SCHEMA_VERSION
from .store import Store

__all__ = ["DEFAULT_LEASE", "SCHEMA_VERSION", "PostgresSchemaTooNew", "PostgresStore", "redact"]


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
