"""The database seam: what the store's logic needs of a database, and nothing more: the `Db` and
`Tx` protocols, `:name` numbering, and the codecs both adapters share.

The store's operations are written once, in SQL with `:named` parameters, over this `Db`; each
adapter (`sqlite.py`, `postgres.py`) keeps what only its database has: SQLite's exclusive file
lock and single connection, PostgreSQL's pool, row locks and advisory locks. Where an operation's
SQL must differ, its two variants stand next to each other in the one module that uses them
(`db.dialect` picks), never here. The seam and its adapters never import the schema: the
store's core migrates (`StoreCore._migrate`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal, Protocol

from agent_core import replace_lone_surrogates

__all__ = [
    "Db",
    "Dialect",
    "Params",
    "Row",
    "Tx",
    "aware",
    "json_text",
    "numbered",
    "to_text",
    "utc_now",
]

Dialect = Literal["sqlite", "postgresql"]

Params = Mapping[str, Any]
"""A statement's parameters by name (`:ledger_id` in the SQL is `{"ledger_id": ...}`)."""

Row = Any
"""A result row: `row["column"]` and `row[0]` both work (sqlite3.Row, asyncpg.Record)."""


class Tx(Protocol):
    """Statements inside one transaction (or one read) of a `Db`."""

    async def fetch_one(self, sql: str, params: Params | None = None) -> Row | None: ...

    async def fetch_all(self, sql: str, params: Params | None = None) -> list[Row]: ...

    async def fetch_value(self, sql: str, params: Params | None = None) -> Any:
        """The first column of the first row, or None when there is no row."""
        ...

    async def execute(self, sql: str, params: Params | None = None) -> int:
        """Run one statement; returns the number of rows it touched."""
        ...

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None: ...


class Db(Protocol):
    """One database, the store's only way to it. The store migrates it (`StoreCore`): the
    database keeps only its version."""

    dialect: Dialect
    name: str
    """How messages name the database (a path, or a URL without its password)."""
    for_update: str
    """Appended to a SELECT whose rows the transaction then writes: `FOR UPDATE` where other
    processes may write them meanwhile (PostgreSQL), nothing where the transaction already
    holds the only write lock (SQLite's `BEGIN IMMEDIATE`)."""
    skip_locked: str
    """`FOR UPDATE SKIP LOCKED` for a sweep whose rows another replica may be handling (it
    handles them), nothing on SQLite."""
    exclusive: bool
    """This store is the database's one serving process (SQLite's exclusive lock taken)."""

    async def open(self, newest: int) -> int:
        """Connect, refusing (`SchemaTooNew`) a database whose schema is newer than `newest`
        before anything is written to it; the version it is at."""
        ...

    async def close(self) -> None: ...

    async def abort(self) -> None:
        """Drop every connection now, without waiting on the server: a stop while the
        database does not answer (a query's cancel would wait on it forever)."""
        ...

    def transaction(self, what: str) -> AbstractAsyncContextManager[Tx]:
        """One write transaction, committed when the block ends, rolled back on error; driver
        errors become `StoreError` naming `what` and the database."""
        ...

    def reading(self, what: str, *, snapshot: bool = False) -> AbstractAsyncContextManager[Tx]:
        """Reads of committed data; `snapshot`: all of them see one moment."""
        ...

    async def advisory_lock(self, tx: Tx, key: int, name: str | None = None) -> None:
        """Serialise this transaction with others holding (`key`, `name`) until it ends
        (PostgreSQL); nothing on SQLite, whose write transactions are serial already."""
        ...

    async def version(self, tx: Tx, newest: int) -> int:
        """The schema version (0: never migrated), read in `tx`; refuses one above `newest`."""
        ...

    async def set_version(self, tx: Tx, version: int) -> None:
        """Record that the schema is at `version`, in the migration's transaction."""
        ...

    def time_in(self, moment: datetime) -> Any: ...

    def time_out(self, value: Any) -> datetime | None: ...

    def json_in(self, value: Any) -> Any: ...

    def json_out(self, value: Any) -> Any: ...

    def list_in(self, values: Sequence[str]) -> Any:
        """A list of strings as its column stores it (PostgreSQL `text[]`, SQLite JSON)."""
        ...

    def list_out(self, value: Any) -> tuple[str, ...]: ...


# -- codecs both adapters share -------------------------------------------------------------------


def utc_now() -> datetime:
    """The default clock of a store."""
    return datetime.now(UTC)


def aware(moment: datetime) -> datetime:
    """A naive datetime is taken to be UTC (the store never deals in local time)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def to_text(moment: datetime) -> str:
    """Fixed-width ISO text (always microseconds, always `+00:00`), so the text sorts like the
    instants it names and `expires_at <= :now` is a plain comparison on an indexed column."""
    return aware(moment).astimezone(UTC).isoformat(timespec="microseconds")


_JSON_TEXT = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode
"""`json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)`, its encoder built once."""


def json_text(value: Any) -> str:
    """`value` as JSON text with UTF-8 kept and lone surrogates replaced (the database's UTF-8
    encode would refuse them and fail the write)."""
    return replace_lone_surrogates(_JSON_TEXT(value))


_NAME = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@lru_cache(maxsize=1024)
def numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` with `:name` parameters as `$1, $2, ...` (PostgreSQL's style), and the names in
    number order. Computed once per SQL string: a click runs the same few dozen statements.
    Quoted literals (`'pending:%'`) and casts (`::text`) are left alone."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    parts = sql.split("'")
    for i in range(0, len(parts), 2):  # the even parts are outside quotes
        parts[i] = _NAME.sub(number, parts[i])
    return "'".join(parts), tuple(names)
