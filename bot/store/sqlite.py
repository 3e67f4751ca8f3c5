"""The SQLite adapter: one file, one connection, and the exclusive lock of the serving process.

Everything that must survive a restart is committed before the caller goes on
(`synchronous=FULL`). Write transactions are `BEGIN IMMEDIATE`, so they stay correct when two
stores (two processes) share the file; one store serialises its own tasks with an
`asyncio.Lock`, because they share one connection and a transaction must not interleave with
another task's statements.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from .db import Dialect, Params, Row, json_text, to_text
from .errors import DatabaseLocked, DatabaseReplaced, SchemaTooNew, StoreError

__all__ = ["SQLiteDb"]

logger = logging.getLogger("bot.store")


def _take_lock(path: Path, lock_path: Path) -> int:
    """Hold `lock_path` exclusively (flock) and return its descriptor; `DatabaseLocked` if taken.

    flock rather than a pid file: the kernel drops the lock when the process dies, however it
    dies, so a crash never leaves a stale lock behind. The holder's pid is written into the file
    only to name it in the error.
    """
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
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


class _Tx:
    """Statements on the one connection; sqlite3 binds `:name` parameters itself."""

    __slots__ = ("_conn",)

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def fetch_all(self, sql: str, params: Params | None = None) -> list[Row]:
        # One trip to aiosqlite's thread instead of three (execute, fetch, close).
        return list(await self._conn.execute_fetchall(sql, params or {}))

    async def fetch_one(self, sql: str, params: Params | None = None) -> Row | None:
        rows = await self.fetch_all(sql, params)
        return rows[0] if rows else None

    async def fetch_value(self, sql: str, params: Params | None = None) -> Any:
        row = await self.fetch_one(sql, params)
        return None if row is None else row[0]

    async def execute(self, sql: str, params: Params | None = None) -> int:
        cursor = await self._conn.execute(sql, params or {})
        return cursor.rowcount  # not closed: that would be a second trip to the thread

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        await self._conn.executemany(sql, rows)


class SQLiteDb:
    """The file at `path` (WAL, `synchronous=FULL`); its version is `PRAGMA user_version`.

    `exclusive=True` is for the one process that serves the bot: opening also takes an
    exclusive lock on the sidecar file `<db>.lock`, held until close, and raises
    `DatabaseLocked` if another process holds it (two bots would each `recover()` the other's
    in-flight calls). Readers such as `opsgate audit` leave it False and open alongside.
    """

    dialect: Dialect = "sqlite"
    for_update = ""
    skip_locked = ""

    def __init__(self, path: str | Path, *, exclusive: bool = False, busy_timeout: float = 30.0):
        self.path = Path(path)
        self.name = str(self.path)
        self.exclusive = exclusive
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._busy_timeout_ms = int(busy_timeout * 1000)
        self._conn: aiosqlite.Connection | None = None
        self._lock_fd: int | None = None
        self._identity: dict[str, tuple[int, int]] = {}
        """(device, inode) of the file and of its WAL as opened: checked before every write."""
        self._replaced: DatabaseReplaced | None = None
        self.lock = asyncio.Lock()

    async def open(self, newest: int) -> int:
        if self._conn is not None:
            raise StoreError(f"store {self.name!r} is already open")
        _create_private(self.path)
        lock_fd = _take_lock(self.path, self.lock_path) if self.exclusive else None
        try:
            try:
                conn = await aiosqlite.connect(self.path, isolation_level=None)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open database {self.name!r}: {exc}") from exc
            try:
                found = await self._prepare(conn, newest)
            except BaseException:
                await conn.close()
                raise
        except BaseException:
            if lock_fd is not None:
                _release_lock(lock_fd)
            raise
        self._conn, self._lock_fd = conn, lock_fd
        self._identity = {
            name: identity
            for name, file in (("file", self.path), ("WAL", self._wal))
            if (identity := _identity(file)) is not None
        }
        return found

    @property
    def _wal(self) -> Path:
        return self.path.with_name(self.path.name + "-wal")

    def check_identity(self) -> None:
        """`DatabaseReplaced` if the file (or its WAL) is no longer the one opened: deleted,
        or another file put in its place. Once found, every later write is refused too."""
        if self._replaced is not None:
            raise self._replaced
        for name, file in (("file", self.path), ("WAL", self._wal)):
            opened = self._identity.get(name)
            now = _identity(file)
            if opened is None:  # a WAL SQLite had not made yet when the store opened
                if now is not None:
                    self._identity[name] = now
                continue
            if now != opened:
                what = "was deleted" if now is None else "was replaced by another file"
                self._replaced = DatabaseReplaced(
                    self.path, what if name == "file" else f"(its WAL) {what}"
                )
                logger.error("%s", self._replaced)
                raise self._replaced

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

    async def abort(self) -> None:
        """A local file always answers: closing it is the quickest stop."""
        await self.close()

    async def _prepare(self, conn: aiosqlite.Connection, newest: int) -> int:
        conn.row_factory = sqlite3.Row
        try:
            await conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            # Read the version before anything that could write (journal_mode writes the header).
            found = await _user_version(conn)
            if found > newest:
                raise SchemaTooNew(self.path, found, newest)
            await conn.execute("PRAGMA journal_mode = WAL")
            # FULL: a commit is on disk before the caller goes on, even across a power cut; an
            # `executing` mark that could vanish would let a call run twice.
            await conn.execute("PRAGMA synchronous = FULL")
            await conn.execute("PRAGMA foreign_keys = ON")
            return found
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.name!r}: {exc}") from exc

    async def version(self, tx: Any, newest: int) -> int:
        found = int(await tx.fetch_value("PRAGMA user_version") or 0)
        if found > newest:
            raise SchemaTooNew(self.path, found, newest)
        return found

    async def set_version(self, tx: Any, version: int) -> None:
        await tx.execute(f"PRAGMA user_version = {int(version)}")

    def connection(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise StoreError(f"store {self.name!r} is not open; use `async with SQLiteStore(...)`")
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
            raise StoreError(f"{what} failed on {self.name!r}: {exc}") from exc

    @asynccontextmanager
    async def transaction(self, what: str) -> AsyncIterator[_Tx]:
        async with self.lock:
            conn = self.connection()
            self.check_identity()
            await self._begin(conn, what)
            try:
                yield _Tx(conn)
                await conn.execute("COMMIT")
            except BaseException as exc:
                await self._rollback(conn)
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"{what} failed on {self.name!r}: {exc}") from exc
                raise

    @asynccontextmanager
    async def reading(self, what: str, *, snapshot: bool = False) -> AsyncIterator[_Tx]:
        """Reads take the lock too, so they never see another task's uncommitted transaction
        (and so see one moment of this store's writes; `snapshot` needs nothing more)."""
        async with self.lock:
            conn = self.connection()
            try:
                yield _Tx(conn)
            except sqlite3.Error as exc:
                raise StoreError(f"{what} failed on {self.name!r}: {exc}") from exc

    async def advisory_lock(self, tx: Any, key: int, name: str | None = None) -> None:
        """Nothing to do: `BEGIN IMMEDIATE` already made this transaction the only writer."""

    def time_in(self, moment: datetime) -> str:
        return to_text(moment)

    def time_out(self, value: Any) -> datetime | None:
        return None if value is None else datetime.fromisoformat(value)

    def json_in(self, value: Any) -> str:
        return json_text(value)

    def json_out(self, value: Any) -> Any:
        return json.loads(value)

    def list_in(self, values: Sequence[str]) -> str:
        return json_text(list(values))

    def list_out(self, value: Any) -> tuple[str, ...]:
        return tuple(json.loads(value))


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def _create_private(path: Path) -> None:
    """A new database file is created readable by its owner only (0600), in a directory made
    0700 if the bot creates it: a command run as another user (`run_as`) must not read it,
    whatever the umask. SQLite gives its WAL and shared-memory files the file's mode."""
    if path.exists():
        return
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))


async def _user_version(conn: aiosqlite.Connection) -> int:
    rows = list(await conn.execute_fetchall("PRAGMA user_version"))
    return int(rows[0][0]) if rows else 0
