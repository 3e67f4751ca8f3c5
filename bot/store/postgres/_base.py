"""The connection machinery every part of `PostgresStore` shares: the pool, migrations,
transactions, and the steps several operations take inside one (append, audit, row locks).

Replicas share the database, so there is no exclusive lock: each write transaction first locks
the rows it reads before writing (`SELECT ... FOR UPDATE`, the session before its calls, always
in that order so two transactions never wait on each other in a cycle), and the conditional
updates keep "first writer wins" however many processes race.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from agent_core.messages import ChatMessage

from .._rules import Person
from .._text import json_text, message_body
from .._time import aware, utc_now
from ..errors import SchemaTooNew, StoreError, UnknownCall, UnknownSession
from ..models import ToolCallRow
from ._rows import call_row, count
from ._schema import MIGRATIONS, SCHEMA_VERSION, VERSION_TABLE

__all__ = ["MIGRATE_LOCK", "PostgresSchemaTooNew", "StoreBase", "redact"]

logger = logging.getLogger("bot.store")

MIGRATE_LOCK = 0x0F5_6A7E
"""Advisory lock key held while migrating (replicas starting together migrate one at a time)."""

Connection = Any
"""An asyncpg connection (its pool proxy is untyped, so the alias only documents intent)."""


def redact(url: str) -> str:
    """The URL without its password, fit for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresSchemaTooNew(SchemaTooNew):
    """The database was migrated by a newer OpsGate; refuse rather than guess."""

    def __init__(self, url: str, found: int, supported: int) -> None:
        StoreError.__init__(
            self,
            f"database {url!r} has schema version {found}, but this OpsGate supports "
            f"versions up to {supported}; upgrade OpsGate (the database was left unchanged)",
        )
        self.url = url
        self.found = found
        self.supported = supported


async def _init_connection(conn: Connection) -> None:
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        encoder=json_text,
        decoder=json.loads,
    )


class StoreBase:
    """Pool, migrations and transaction helpers; the operations live in the mixins."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        min_size: int = 1,
        max_size: int = 10,
        migrate: bool = True,
        person: Person = str,
    ) -> None:
        self.url = url
        self.name = redact(url)
        self._clock = clock
        self._person = person
        self._min_size = min_size
        self._max_size = max_size
        self._migrate_on_open = migrate
        self._pool: asyncpg.Pool | None = None
        self._instance_id: str | None = None
        self._origin = f"opsgate {secrets.token_hex(6)}"
        """This store's `application_name`: wake-ups name the store whose write caused them."""

    # -- connection ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and (unless told not to) bring the schema up to date. Prefer `async with`."""
        if self._pool is not None:
            raise StoreError(f"store {self.name!r} is already open")
        try:
            pool = await asyncpg.create_pool(
                self.url,
                min_size=self._min_size,
                max_size=self._max_size,
                init=_init_connection,
                server_settings={"application_name": self._origin},
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"cannot open database {self.name!r}: {exc}") from exc
        self._pool = pool
        try:
            if self._migrate_on_open:
                await self.migrate()
            else:
                await self.schema_version()
        except BaseException:
            self._pool = None
            await pool.close()
            raise

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError(
                f"store {self.name!r} is not open; use `async with PostgresStore(...)`"
            )
        return self._pool

    async def schema_version(self) -> int:
        """The database's schema version (0 when never migrated); refuses a newer one."""
        async with self._reading("schema_version") as conn:
            table = await conn.fetchval("SELECT to_regclass('schema_version')")
            found = (
                0 if table is None else await conn.fetchval("SELECT version FROM schema_version")
            )
        found = int(found or 0)
        if found > SCHEMA_VERSION:
            raise PostgresSchemaTooNew(self.name, found, SCHEMA_VERSION)
        return found

    async def migrate(self) -> int:
        """Apply the missing migrations; idempotent, and safe when replicas start together
        (one transaction under an advisory lock: the others wait, then find nothing to do)."""
        async with self._transaction("migrate") as conn:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATE_LOCK)
            await conn.execute(VERSION_TABLE)
            found = await conn.fetchval("SELECT version FROM schema_version")
            current = int(found or 0)
            if current > SCHEMA_VERSION:
                raise PostgresSchemaTooNew(self.name, current, SCHEMA_VERSION)
            for version in range(current, SCHEMA_VERSION):
                for statement in MIGRATIONS[version]:
                    await conn.execute(statement)
            if current < SCHEMA_VERSION:
                await conn.execute(
                    "INSERT INTO schema_version (singleton, version) VALUES (true, $1) "
                    "ON CONFLICT (singleton) DO UPDATE SET version = $1, updated_at = now()",
                    SCHEMA_VERSION,
                )
                logger.info("migrated %s to schema version %d", self.name, SCHEMA_VERSION)
            return SCHEMA_VERSION

    @asynccontextmanager
    async def _transaction(self, what: str) -> AsyncIterator[Connection]:
        """One transaction: committed if the block ends, rolled back on error."""
        pool = self._require_pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                yield conn
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"{what} failed on {self.name!r}: {exc}") from exc

    @asynccontextmanager
    async def _reading(self, what: str) -> AsyncIterator[Connection]:
        """A connection for reads that need no transaction (each statement sees committed data)."""
        pool = self._require_pool()
        try:
            async with pool.acquire() as conn:
                yield conn
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"{what} failed on {self.name!r}: {exc}") from exc

    def _now(self) -> datetime:
        return aware(self._clock())

    # -- shared steps (inside a transaction) -----------------------------------------------------

    async def _session_record(
        self, conn: Connection, session_id: str, *, lock: bool = False
    ) -> Any:
        sql = "SELECT * FROM sessions WHERE id = $1" + (" FOR UPDATE" if lock else "")
        row = await conn.fetchrow(sql, session_id)
        if row is None:
            raise UnknownSession(session_id)
        return row

    async def _call(self, conn: Connection, ledger_id: str, *, lock: bool = False) -> ToolCallRow:
        sql = "SELECT * FROM tool_calls WHERE id = $1" + (" FOR UPDATE" if lock else "")
        row = await conn.fetchrow(sql, ledger_id)
        if row is None:
            raise UnknownCall(ledger_id)
        return call_row(row)

    async def _append(
        self, conn: Connection, session_id: str, messages: Sequence[ChatMessage]
    ) -> int:
        """Insert messages after the last one; returns the seq of the first.

        The `UPDATE sessions` comes first: it locks the session row, so two appends to one
        session take turns and never compute the same next seq.
        """
        now = self._now()
        status = await conn.execute(
            "UPDATE sessions SET updated_at = $1 WHERE id = $2", now, session_id
        )
        if count(status) == 0:
            raise UnknownSession(session_id)
        first = int(
            await conn.fetchval(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = $1", session_id
            )
        )
        await conn.executemany(
            "INSERT INTO messages (session_id, seq, body, created_at) VALUES ($1, $2, $3, $4)",
            [(session_id, first + i, message_body(m), now) for i, m in enumerate(messages)],
        )
        calls_at = [
            first + i for i, m in enumerate(messages) if m.role == "assistant" and m.tool_calls
        ]
        if calls_at:
            await conn.execute(
                "UPDATE sessions SET last_calls_seq = $1 WHERE id = $2", calls_at[-1], session_id
            )
        return first

    async def _latest_batch_messages(
        self, conn: Connection, session_id: str, seq: int | None
    ) -> list[ChatMessage]:
        """The history from the last tool-call message on (what `close_batch` needs)."""
        if seq is None:
            return []
        rows = await conn.fetch(
            "SELECT body FROM messages WHERE session_id = $1 AND seq >= $2 ORDER BY seq",
            session_id,
            seq,
        )
        return [ChatMessage.from_json(row[0]) for row in rows]

    async def _write_audit(
        self,
        conn: Connection,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        await conn.execute(
            "INSERT INTO audit (at, event, actor, session_id, call_id, details) "
            "VALUES ($1, $2, $3, $4, $5, $6)",
            self._now(),
            event,
            actor,
            session_id,
            call_id,
            dict(details or {}),
        )
