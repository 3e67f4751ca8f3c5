"""The SQLite file itself: the exclusive lock, opening and migrating, and the transactions.

Everything that must survive a restart is committed before the caller goes on. Writes that read
before they write run in `BEGIN IMMEDIATE` transactions, so they stay correct when two stores
(two processes) share the file; one store serialises its own tasks with a lock, because they
share one connection and a transaction must not interleave with another task's statements.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiosqlite

from agent_core.messages import ChatMessage

from .._rules import Person
from .._schema import MIGRATIONS, SCHEMA_VERSION
from .._text import json_text, message_body
from .._time import to_db, utc_now
from ..errors import DatabaseLocked, SchemaTooNew, StoreError, UnknownCall, UnknownSession
from ..models import AuditRow, QueueItem, SessionRow, ToolCallRow

__all__ = ["SQLiteConnection", "fetch_all", "fetch_one"]

logger = logging.getLogger("bot.store")


def _take_lock(path: Path, lock_path: Path) -> int:
    """Hold `lock_path` exclusively (flock) and return its descriptor; `DatabaseLocked` if taken.

    flock rather than a pid file: the kernel drops the lock when the process dies, however it
    dies, so a crash never leaves a stale lock behind. The holder's pid is written into the file
    only to name it in the error.
    """
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open lock file {str(lock_path)!r}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        os.close(fd)
        raise DatabaseLocked(path, lock_path, holder) from None
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"cannot lock {str(lock_path)!r}: {exc}") from exc
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:  # the lock is what matters; the pid is only a courtesy
        logger.debug("could not write the pid into %s", lock_path)
    return fd


def _lock_holder(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _release_lock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def session_row(row: sqlite3.Row) -> SessionRow:
    return SessionRow.model_validate(dict(row))


def call_row(row: sqlite3.Row) -> ToolCallRow:
    data = dict(row)
    data["approvals"] = json.loads(data["approvals"])
    return ToolCallRow.model_validate(data)


def queue_row(row: sqlite3.Row) -> QueueItem:
    return QueueItem.model_validate(dict(row))


def audit_row(row: sqlite3.Row) -> AuditRow:
    data = dict(row)
    data["details"] = json.loads(data["details"])
    return AuditRow.model_validate(data)


async def fetch_one(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> sqlite3.Row | None:
    rows = await fetch_all(conn, sql, params)
    return rows[0] if rows else None


async def fetch_all(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> list[sqlite3.Row]:
    # One trip to aiosqlite's thread instead of three (execute, fetch, close).
    return list(await conn.execute_fetchall(sql, params))


async def _user_version(conn: aiosqlite.Connection) -> int:
    row = await fetch_one(conn, "PRAGMA user_version")
    return 0 if row is None else int(row[0])


class SQLiteConnection:
    """One connection to the file and the machinery every part of `SQLiteStore` writes through.

    Use it as an async context manager: entering opens the file (creating it if needed) and
    applies pending migrations; leaving closes it.

    `exclusive=True` is for the one process that serves the bot: entering also takes an
    exclusive lock on the sidecar file `<db>.lock`, held until the store closes, and raises
    `DatabaseLocked` if another process holds it (two bots would each `recover()` the other's
    in-flight calls). Readers such as `opsgate audit` leave it False and open alongside.

    `person` names a user id in text for people and the model (refusals, "rejected by …");
    the store keeps ids plain, and the bot passes its mention function.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        exclusive: bool = False,
        clock: Callable[[], datetime] = utc_now,
        busy_timeout: float = 30.0,
        person: Person = str,
    ) -> None:
        self.path = Path(path)
        self.exclusive = exclusive
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._clock = clock
        self._person = person
        self._busy_timeout_ms = int(busy_timeout * 1000)
        self._conn: aiosqlite.Connection | None = None
        self._lock_fd: int | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        mode = ", exclusive=True" if self.exclusive else ""
        return f"SQLiteStore({str(self.path)!r}{mode})"

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Open the file and bring its schema up to date. Prefer `async with`."""
        if self._conn is not None:
            raise StoreError(f"store {str(self.path)!r} is already open")
        lock_fd = _take_lock(self.path, self.lock_path) if self.exclusive else None
        try:
            try:
                conn = await aiosqlite.connect(self.path, isolation_level=None)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open database {str(self.path)!r}: {exc}") from exc
            try:
                await self._prepare(conn)
            except BaseException:
                await conn.close()
                raise
        except BaseException:
            if lock_fd is not None:
                _release_lock(lock_fd)
            raise
        self._conn, self._lock_fd = conn, lock_fd

    async def close(self) -> None:
        """Close the file, then release the exclusive lock (if taken): in that order, so a
        successor never opens the file while this store can still write to it."""
        conn, self._conn = self._conn, None
        lock_fd, self._lock_fd = self._lock_fd, None
        try:
            if conn is not None:
                await conn.close()
        finally:
            if lock_fd is not None:
                _release_lock(lock_fd)

    async def _prepare(self, conn: aiosqlite.Connection) -> None:
        conn.row_factory = sqlite3.Row
        try:
            await conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            # Read the version before anything that could write (journal_mode writes the header).
            found = await _user_version(conn)
            if found > SCHEMA_VERSION:
                raise SchemaTooNew(self.path, found, SCHEMA_VERSION)
            await conn.execute("PRAGMA journal_mode = WAL")
            # FULL: a commit is on disk before the caller goes on, even across a power cut; an
            # `executing` mark that could vanish would let a call run twice.
            await conn.execute("PRAGMA synchronous = FULL")
            await conn.execute("PRAGMA foreign_keys = ON")
            if found < SCHEMA_VERSION:
                await self._migrate(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {str(self.path)!r}: {exc}") from exc

    async def _migrate(self, conn: aiosqlite.Connection) -> None:
        while True:
            await conn.execute("BEGIN IMMEDIATE")
            try:
                # Re-read under the write lock: another process may have migrated meanwhile.
                current = await _user_version(conn)
                if current > SCHEMA_VERSION:
                    raise SchemaTooNew(self.path, current, SCHEMA_VERSION)
                if current == SCHEMA_VERSION:
                    await conn.execute("COMMIT")
                    return
                for statement in MIGRATIONS[current]:
                    await conn.execute(statement)
                await conn.execute(f"PRAGMA user_version = {current + 1}")
                await conn.execute("COMMIT")
                logger.info("migrated %s to schema version %d", self.path, current + 1)
            except BaseException:
                await self._rollback(conn)
                raise

    def _connection(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise StoreError(
                f"store {str(self.path)!r} is not open; use `async with SQLiteStore(...)`"
            )
        return self._conn

    async def _rollback(self, conn: aiosqlite.Connection) -> None:
        try:
            await conn.execute("ROLLBACK")
        except sqlite3.Error:  # no transaction left to roll back (e.g. COMMIT itself failed)
            logger.debug("rollback on %s found no open transaction", self.path)

    async def _begin(self, conn: aiosqlite.Connection, what: str) -> None:
        """`BEGIN IMMEDIATE`, safe to cancel: the worker thread runs the statement even when the
        waiting task is cancelled (say, while another process holds the write lock), so a
        cancelled begin is waited for and rolled back; else the connection would stay inside a
        transaction and every later write would fail."""
        begin = asyncio.ensure_future(conn.execute("BEGIN IMMEDIATE"))
        try:
            await asyncio.shield(begin)
        except asyncio.CancelledError:
            with contextlib.suppress(sqlite3.Error):
                await begin
                await self._rollback(conn)
            raise
        except sqlite3.Error as exc:
            raise StoreError(f"{what} failed on {str(self.path)!r}: {exc}") from exc

    @asynccontextmanager
    async def _transaction(self, what: str) -> AsyncIterator[aiosqlite.Connection]:
        """One `BEGIN IMMEDIATE` transaction: committed if the block ends, rolled back on error."""
        async with self._lock:
            conn = self._connection()
            await self._begin(conn, what)
            try:
                yield conn
                await conn.execute("COMMIT")
            except BaseException as exc:
                await self._rollback(conn)
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"{what} failed on {str(self.path)!r}: {exc}") from exc
                raise

    @asynccontextmanager
    async def _reading(self, what: str) -> AsyncIterator[aiosqlite.Connection]:
        """Reads take the lock too, so they never see another task's uncommitted transaction."""
        async with self._lock:
            conn = self._connection()
            try:
                yield conn
            except sqlite3.Error as exc:
                raise StoreError(f"{what} failed on {str(self.path)!r}: {exc}") from exc

    def _now(self) -> str:
        return to_db(self._clock())

    # -- steps shared by the parts (inside a transaction) ----------------------------------------

    async def _session_row(self, conn: aiosqlite.Connection, session_id: str) -> sqlite3.Row:
        row = await fetch_one(conn, "SELECT * FROM sessions WHERE id = ?", (session_id,))
        if row is None:
            raise UnknownSession(session_id)
        return row

    async def _call_row(self, conn: aiosqlite.Connection, ledger_id: str) -> ToolCallRow:
        row = await fetch_one(conn, "SELECT * FROM tool_calls WHERE id = ?", (ledger_id,))
        if row is None:
            raise UnknownCall(ledger_id)
        return call_row(row)

    async def _append(
        self, conn: aiosqlite.Connection, session_id: str, messages: Sequence[ChatMessage]
    ) -> int:
        """Insert messages after the last one; returns the seq of the first. Cost: O(log n)."""
        now = self._now()
        cursor = await conn.execute(
            "UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id)
        )
        if cursor.rowcount == 0:
            raise UnknownSession(session_id)
        row = await fetch_one(
            conn,
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?",
            (session_id,),
        )
        first = 0 if row is None else int(row[0])
        await conn.executemany(
            "INSERT INTO messages (session_id, seq, body, created_at) VALUES (?, ?, ?, ?)",
            [(session_id, first + i, message_body(m), now) for i, m in enumerate(messages)],
        )
        calls_at = [
            first + i for i, m in enumerate(messages) if m.role == "assistant" and m.tool_calls
        ]
        if calls_at:
            await conn.execute(
                "UPDATE sessions SET last_calls_seq = ? WHERE id = ?", (calls_at[-1], session_id)
            )
        return first

    async def _latest_batch_messages(
        self, conn: aiosqlite.Connection, session_id: str, seq: int | None
    ) -> list[ChatMessage]:
        """The history from the last tool-call message on (what `close_batch` needs)."""
        if seq is None:
            return []
        tail = await fetch_all(
            conn,
            "SELECT body FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq",
            (session_id, seq),
        )
        return [ChatMessage.from_json(r[0]) for r in tail]

    async def _write_audit(
        self,
        conn: aiosqlite.Connection,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        await conn.execute(
            "INSERT INTO audit (at, event, actor, session_id, call_id, details) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                self._now(),
                event,
                actor,
                session_id,
                call_id,
                json_text(dict(details or {})),
            ),
        )
