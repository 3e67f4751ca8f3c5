"""The PostgreSQL adapter: an asyncpg pool, the jsonb codec, row and advisory locks, the version.

Replicas share the database, so there is no exclusive lock: each write transaction first locks
the rows it reads before writing (`for_update`: the session before its calls, always in that
order, so two transactions never wait on each other in a cycle), and conditional updates keep
"first writer wins" however many processes race.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg

from bot.settings import redact_url

from .db import Dialect, Params, Row, aware, json_text, numbered
from .errors import PostgresSchemaTooNew, StoreError

__all__ = ["PostgresDb"]

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version    integer NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)
"""
"""Where the database's schema version is kept (one row), made by the first migration."""

_FAILURES = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


def _args(sql: str, params: Params | None) -> tuple[str, list[Any]]:
    text, names = numbered(sql)
    values = params or {}
    return text, [values[name] for name in names]


def _count(status: str) -> int:
    """Rows a statement touched, from asyncpg's command tag ("UPDATE 1", "INSERT 0 1")."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class _Tx:
    """Statements on one pooled connection, `:name` parameters numbered once per SQL string."""

    __slots__ = ("conn",)

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch_all(self, sql: str, params: Params | None = None) -> list[Row]:
        text, args = _args(sql, params)
        return list(await self.conn.fetch(text, *args))

    async def fetch_one(self, sql: str, params: Params | None = None) -> Row | None:
        text, args = _args(sql, params)
        return await self.conn.fetchrow(text, *args)

    async def fetch_value(self, sql: str, params: Params | None = None) -> Any:
        text, args = _args(sql, params)
        return await self.conn.fetchval(text, *args)

    async def execute(self, sql: str, params: Params | None = None) -> int:
        text, args = _args(sql, params)
        return _count(await self.conn.execute(text, *args))

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        text, names = numbered(sql)
        await self.conn.executemany(text, [[row[name] for name in names] for row in rows])


async def _init_connection(conn: Any) -> None:
    await conn.set_type_codec("jsonb", schema="pg_catalog", encoder=json_text, decoder=json.loads)


class PostgresDb:
    """The database at `url`; `application_name` is `origin`, so the wake-up triggers can name
    the store whose write caused them. Its version is the one row of `schema_version`."""

    dialect: Dialect = "postgresql"
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    exclusive = False

    def __init__(self, url: str, *, origin: str, min_size: int = 1, max_size: int = 10) -> None:
        self.url = url
        self.name = redact_url(url)
        self.origin = origin
        self._min_size = min_size
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None

    async def open(self, newest: int) -> int:
        if self._pool is not None:
            raise StoreError(f"store {self.name!r} is already open")
        try:
            pool = await asyncpg.create_pool(
                self.url,
                min_size=self._min_size,
                max_size=self._max_size,
                init=_init_connection,
                server_settings={"application_name": self.origin},
            )
        except _FAILURES as exc:
            raise StoreError(f"cannot open database {self.name!r}: {exc}") from exc
        self._pool = pool
        try:
            async with self.reading("schema_version") as tx:
                return await self.version(tx, newest)
        except BaseException:
            self._pool = None
            await pool.close()
            raise

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def abort(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError(
                f"store {self.name!r} is not open; use `async with PostgresStore(...)`"
            )
        return self._pool

    async def version(self, tx: Any, newest: int) -> int:
        table = await tx.fetch_value("SELECT to_regclass('schema_version')")
        found = 0 if table is None else await tx.fetch_value("SELECT version FROM schema_version")
        found = int(found or 0)
        if found > newest:
            raise PostgresSchemaTooNew(self.name, found, newest)
        return found

    async def set_version(self, tx: Any, version: int) -> None:
        await tx.execute(_VERSION_TABLE)
        await tx.execute(
            "INSERT INTO schema_version (singleton, version) VALUES (true, :version) "
            "ON CONFLICT (singleton) DO UPDATE SET version = :version, updated_at = now()",
            {"version": version},
        )

    @asynccontextmanager
    async def transaction(self, what: str) -> AsyncIterator[_Tx]:
        pool = self._require_pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                yield _Tx(conn)
        except _FAILURES as exc:
            raise StoreError(f"{what} failed on {self.name!r}: {exc}") from exc

    @asynccontextmanager
    async def reading(self, what: str, *, snapshot: bool = False) -> AsyncIterator[_Tx]:
        """A pooled connection; each statement sees committed data, or with `snapshot` all of
        them see one moment (a transaction)."""
        if snapshot:
            async with self.transaction(what) as tx:
                yield tx
            return
        pool = self._require_pool()
        try:
            async with pool.acquire() as conn:
                yield _Tx(conn)
        except _FAILURES as exc:
            raise StoreError(f"{what} failed on {self.name!r}: {exc}") from exc

    async def advisory_lock(self, tx: Any, key: int, name: str | None = None) -> None:
        if name is None:
            await tx.execute("SELECT pg_advisory_xact_lock(:key)", {"key": key})
        else:
            await tx.execute(
                "SELECT pg_advisory_xact_lock(:key, hashtext(:name))", {"key": key, "name": name}
            )

    def time_in(self, moment: datetime) -> datetime:
        return aware(moment)

    def time_out(self, value: Any) -> datetime | None:
        return value if value is None else aware(value)

    def json_in(self, value: Any) -> Any:
        return value

    def json_out(self, value: Any) -> Any:
        return value

    def list_in(self, values: Sequence[str]) -> list[str]:
        return list(values)

    def list_out(self, value: Any) -> tuple[str, ...]:
        return tuple(value)
