"""`SQLiteStore`: sessions, messages, the tool-call ledger and the audit log in one SQLite file.

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
import secrets
import sqlite3
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, get_args

import aiosqlite

from agent_core import pending_tool_calls
from agent_core.approvals import ToolApprovalResponse
from agent_core.events import ToolApprovalRequest, ToolCallHeld
from agent_core.exceptions import ToolCallAlreadyStarted
from agent_core.messages import ChatMessage, ToolCall, call_digest, canonical_arguments
from bot._duration import format_duration

from ._schema import MIGRATIONS, SCHEMA_VERSION
from ._time import aware, to_db, utc_now
from .errors import DatabaseLocked, SchemaTooNew, StoreError, UnknownCall, UnknownSession
from .models import (
    AuditRow,
    CancelOutcome,
    DecisionOutcome,
    EnqueueOutcome,
    PendingApproval,
    QueueItem,
    RecoveredSession,
    RunState,
    SessionRow,
    ToolCallRow,
)

__all__ = [
    "CANCELLED_MESSAGE",
    "CANCELLED_NOT_RUN_MESSAGE",
    "INTERRUPTED_MESSAGE",
    "NOT_RUN_MESSAGE",
    "SEEN_EVENT_TTL",
    "SQLiteStore",
]

logger = logging.getLogger("bot.store")

INTERRUPTED_MESSAGE = (
    "Interrupted: OpsGate stopped while this call was running; "
    "its outcome is unknown and it was not run again."
)
NOT_RUN_MESSAGE = "Not run: OpsGate restarted before this call ran."
CANCELLED_MESSAGE = "Rejected: cancelled by {user}"
"""The tool message of a gated call whose run was cancelled; `{user}` is a Slack mention."""
CANCELLED_NOT_RUN_MESSAGE = "Not run: the run was cancelled by {user}"
"""The tool message of a held (or already approved) call whose run was cancelled."""
SEEN_EVENT_TTL = timedelta(days=1)
"""How long a Slack event id is remembered; Slack retries within minutes."""

_RUN_STATES: frozenset[str] = frozenset(get_args(RunState))


def _new_id() -> str:
    """Opaque and unguessable: ledger ids travel in Slack buttons."""
    return secrets.token_hex(16)


def _when(moment: datetime | None) -> str:
    return "an unknown time" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _mention(user_id: str) -> str:
    return f"<@{user_id}>"


def _plain(user_id: str) -> str:
    return user_id


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


def _session(row: sqlite3.Row) -> SessionRow:
    return SessionRow.model_validate(dict(row))


def _call(row: sqlite3.Row) -> ToolCallRow:
    data = dict(row)
    data["approvals"] = json.loads(data["approvals"])
    return ToolCallRow.model_validate(data)


def _item(row: sqlite3.Row) -> QueueItem:
    return QueueItem.model_validate(dict(row))


def _audit(row: sqlite3.Row) -> AuditRow:
    data = dict(row)
    data["details"] = json.loads(data["details"])
    return AuditRow.model_validate(data)


def _already(row: ToolCallRow) -> str:
    """Why a decision on a call that is no longer pending was not recorded: who won, and when."""
    if row.status == "expired":
        within = f" (no decision within {row.ttl})" if row.ttl else ""
        return f"expired at {_when(row.expires_at or row.decided_at)}{within}; it was not run"
    if row.decided_by is None:
        return f"already {row.status}"
    if row.status == "cancelled":
        return f"already cancelled by {_mention(row.decided_by)} at {_when(row.decided_at)}"
    verb = "rejected" if row.status == "rejected" else "approved"
    deciders = list(row.approvals) if verb == "approved" and row.approvals else [row.decided_by]
    who = " and ".join(_mention(u) for u in deciders)
    return f"already {verb} by {who} at {_when(row.decided_at)}"


async def _one(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> sqlite3.Row | None:
    rows = await _all(conn, sql, params)
    return rows[0] if rows else None


async def _all(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> list[sqlite3.Row]:
    # One trip to aiosqlite's thread instead of three (execute, fetch, close).
    return list(await conn.execute_fetchall(sql, params))


async def _user_version(conn: aiosqlite.Connection) -> int:
    row = await _one(conn, "PRAGMA user_version")
    return 0 if row is None else int(row[0])


class SQLiteStore:
    """The bot's durable store; implements `agent_core.SessionStore`.

    Use it as an async context manager: entering opens the file (creating it if needed) and
    applies pending migrations; leaving closes it.

    `exclusive=True` is for the one process that serves the bot: entering also takes an
    exclusive lock on the sidecar file `<db>.lock`, held until the store closes, and raises
    `DatabaseLocked` if another process holds it (two bots would each `recover()` the other's
    in-flight calls). Readers such as `opsgate audit` leave it False and open alongside.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        exclusive: bool = False,
        clock: Callable[[], datetime] = utc_now,
        busy_timeout: float = 30.0,
    ) -> None:
        self.path = Path(path)
        self.exclusive = exclusive
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._clock = clock
        self._busy_timeout_ms = int(busy_timeout * 1000)
        self._conn: aiosqlite.Connection | None = None
        self._lock_fd: int | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        mode = ", exclusive=True" if self.exclusive else ""
        return f"SQLiteStore({str(self.path)!r}{mode})"

    # -- connection ----------------------------------------------------------------------------

    async def __aenter__(self) -> SQLiteStore:
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

    @asynccontextmanager
    async def _transaction(self, what: str) -> AsyncIterator[aiosqlite.Connection]:
        """One `BEGIN IMMEDIATE` transaction: committed if the block ends, rolled back on error."""
        async with self._lock:
            conn = self._connection()
            try:
                await conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"{what} failed on {str(self.path)!r}: {exc}") from exc
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

    # -- shared steps (inside a transaction) -----------------------------------------------------

    async def _session_row(self, conn: aiosqlite.Connection, session_id: str) -> sqlite3.Row:
        row = await _one(conn, "SELECT * FROM sessions WHERE id = ?", (session_id,))
        if row is None:
            raise UnknownSession(session_id)
        return row

    async def _call_row(self, conn: aiosqlite.Connection, ledger_id: str) -> ToolCallRow:
        row = await _one(conn, "SELECT * FROM tool_calls WHERE id = ?", (ledger_id,))
        if row is None:
            raise UnknownCall(ledger_id)
        return _call(row)

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
        row = await _one(
            conn,
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?",
            (session_id,),
        )
        first = 0 if row is None else int(row[0])
        await conn.executemany(
            "INSERT INTO messages (session_id, seq, body, created_at) VALUES (?, ?, ?, ?)",
            [(session_id, first + i, m.to_json(), now) for i, m in enumerate(messages)],
        )
        calls_at = [
            first + i for i, m in enumerate(messages) if m.role == "assistant" and m.tool_calls
        ]
        if calls_at:
            await conn.execute(
                "UPDATE sessions SET last_calls_seq = ? WHERE id = ?", (calls_at[-1], session_id)
            )
        return first

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
                json.dumps(dict(details or {}), sort_keys=True, ensure_ascii=False, default=str),
            ),
        )

    # -- sessions -------------------------------------------------------------------------------

    async def get_or_create_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow:
        """The session of a Slack thread, created `idle` on first use."""
        async with self._transaction("get_or_create_session") as conn:
            key = (team_id, channel_id, thread_ts)
            sql = "SELECT * FROM sessions WHERE team_id = ? AND channel_id = ? AND thread_ts = ?"
            row = await _one(conn, sql, key)
            if row is None:
                now = self._now()
                await conn.execute(
                    "INSERT INTO sessions (id, team_id, channel_id, thread_ts, state, created_at, "
                    "updated_at) VALUES (?, ?, ?, ?, 'idle', ?, ?)",
                    (_new_id(), *key, now, now),
                )
                row = await _one(conn, sql, key)
            assert row is not None
            return _session(row)

    async def get_session(self, session_id: str) -> SessionRow | None:
        async with self._reading("get_session") as conn:
            row = await _one(conn, "SELECT * FROM sessions WHERE id = ?", (session_id,))
        return None if row is None else _session(row)

    async def find_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow | None:
        async with self._reading("find_session") as conn:
            row = await _one(
                conn,
                "SELECT * FROM sessions WHERE team_id = ? AND channel_id = ? AND thread_ts = ?",
                (team_id, channel_id, thread_ts),
            )
        return None if row is None else _session(row)

    async def set_requester(self, session_id: str, user_id: str) -> None:
        """Who asked for the current run; recorded as the actor of its approval requests."""
        async with self._transaction("set_requester") as conn:
            cursor = await conn.execute(
                "UPDATE sessions SET requester = ?, updated_at = ? WHERE id = ?",
                (user_id, self._now(), session_id),
            )
            if cursor.rowcount == 0:
                raise UnknownSession(session_id)

    async def claim(
        self,
        session_id: str,
        from_states: Sequence[RunState] | AbstractSet[RunState],
        to_state: RunState,
    ) -> bool:
        """Move the session to `to_state` only if it is in one of `from_states`.

        A conditional update: of any number of concurrent claimers (tasks or processes), exactly
        one gets True. Clears the session's error. (`from_states` is any collection; spelled as
        `Sequence | Set` because mypy cannot match a 1-tuple literal to `Collection[Literal]`.)
        """
        _check_states([*from_states, to_state])
        if not from_states:
            return False
        marks = ", ".join("?" for _ in from_states)
        async with self._transaction("claim") as conn:
            cursor = await conn.execute(
                f"UPDATE sessions SET state = ?, error = NULL, updated_at = ? "
                f"WHERE id = ? AND state IN ({marks})",
                (to_state, self._now(), session_id, *from_states),
            )
            if cursor.rowcount == 1:
                return True
            await self._session_row(conn, session_id)  # an unknown id is an error, not a lost race
            return False

    async def set_state(
        self, session_id: str, state: RunState, *, error: str | None = None
    ) -> None:
        """Set the run state unconditionally (and the error, cleared unless given)."""
        _check_states([state])
        async with self._transaction("set_state") as conn:
            cursor = await conn.execute(
                "UPDATE sessions SET state = ?, error = ?, updated_at = ? WHERE id = ?",
                (state, error, self._now(), session_id),
            )
            if cursor.rowcount == 0:
                raise UnknownSession(session_id)

    # -- messages (agent_core.SessionStore) -----------------------------------------------------

    async def load_messages(self, session_id: str) -> list[ChatMessage]:
        """The whole history, oldest first (empty for an unknown session)."""
        async with self._reading("load_messages") as conn:
            rows = await _all(
                conn, "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            )
        return [ChatMessage.from_json(row[0]) for row in rows]

    async def append_messages(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        """Append in one transaction, writing only the new rows, however long the history is."""
        if not messages:
            return
        async with self._transaction("append_messages") as conn:
            await self._append(conn, session_id, messages)

    async def record_pause(
        self,
        session_id: str,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None:
        """In one transaction: the assistant message, a ledger row per call, the new batch, the
        session's `awaiting_approval` state, and a "request" audit row per gated call."""
        gated = {request.call_id: request for request in requests}
        ids = [call.id for call in message.tool_calls]
        stray = sorted(set(gated) - set(ids))
        if stray:
            raise StoreError(f"approval requests name calls the message does not hold: {stray!r}")
        if len(set(ids)) != len(ids):
            raise StoreError(f"the message repeats a tool call id: {ids!r}")
        async with self._transaction("record_pause") as conn:
            session = await self._session_row(conn, session_id)
            requester = session["requester"]
            seq = await self._append(conn, session_id, [message])
            batch_id = _new_id()
            now = self._now()
            rows: list[tuple[Any, ...]] = []
            for position, call in enumerate(message.tool_calls):
                request = gated.get(call.id)
                shown = call.display_arguments()
                digest = request.digest if request else call_digest(call.name, shown)
                rows.append(
                    (
                        _new_id(),
                        session_id,
                        batch_id,
                        seq,
                        position,
                        call.id,
                        call.name,
                        canonical_arguments(shown),
                        digest,
                        int(request is not None),
                        requester,
                        now,
                    )
                )
            await conn.executemany(
                "INSERT INTO tool_calls (id, session_id, batch_id, message_seq, position, call_id, "
                "name, arguments, digest, needs_approval, status, requested_by, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
                rows,
            )
            await conn.execute(
                "UPDATE sessions SET state = 'awaiting_approval', batch_id = ?, error = NULL, "
                "updated_at = ? WHERE id = ?",
                (batch_id, now, session_id),
            )
            for row in rows:
                if row[9]:
                    await self._write_audit(
                        conn,
                        "request",
                        actor=requester,
                        session_id=session_id,
                        call_id=row[5],
                        details={
                            "ledger_id": row[0],
                            "batch_id": batch_id,
                            "tool": row[6],
                            "arguments": row[7],
                            "digest": row[8],
                        },
                    )

    async def start_tool_call(self, session_id: str, call: ToolCall) -> None:
        """Mark the call `executing` and commit, before it runs.

        Allowed from `approved`, or `pending` for a call that needs no approval; a call of a round
        that did not pause gets its row here. Anything else raises `ToolCallAlreadyStarted` (and
        is audited as a refusal): the call must not run twice.
        """
        refused: str | None = None
        async with self._transaction("start_tool_call") as conn:
            session = await self._session_row(conn, session_id)
            seq = session["last_calls_seq"]
            if seq is None:
                raise UnknownCall(call.id, session_id)
            row = await _one(
                conn,
                "SELECT * FROM tool_calls WHERE session_id = ? AND message_seq = ? AND call_id = ?",
                (session_id, seq, call.id),
            )
            now = self._now()
            if row is None:
                count = await _one(
                    conn,
                    "SELECT COUNT(*) FROM tool_calls WHERE session_id = ? AND message_seq = ?",
                    (session_id, seq),
                )
                shown = call.display_arguments()
                ledger_id, digest = _new_id(), call_digest(call.name, shown)
                await conn.execute(
                    "INSERT INTO tool_calls (id, session_id, batch_id, message_seq, position, "
                    "call_id, name, arguments, digest, needs_approval, status, requested_by, "
                    "created_at, started_at) "
                    "VALUES (?, ?, NULL, ?, ?, ?, ?, ?, ?, 0, 'executing', ?, ?, ?)",
                    (
                        ledger_id,
                        session_id,
                        seq,
                        0 if count is None else int(count[0]),
                        call.id,
                        call.name,
                        canonical_arguments(shown),
                        digest,
                        session["requester"],
                        now,
                        now,
                    ),
                )
                decided_by = None
            else:
                current = _call(row)
                ledger_id, digest, decided_by = current.id, current.digest, current.decided_by
                cursor = await conn.execute(
                    "UPDATE tool_calls SET status = 'executing', started_at = ? WHERE id = ? "
                    "AND (status = 'approved' OR (status = 'pending' AND needs_approval = 0))",
                    (now, ledger_id),
                )
                if cursor.rowcount == 0:
                    refused = current.status
            details: dict[str, Any] = {"ledger_id": ledger_id, "tool": call.name, "digest": digest}
            if refused is None:
                details["approved_by"] = decided_by
                event = "execution_start"
            else:
                details.update(action="execute", why=f"already {refused}")
                event = "refusal"
            await self._write_audit(
                conn,
                event,
                actor=session["requester"],
                session_id=session_id,
                call_id=call.id,
                details=details,
            )
        if refused is not None:
            raise ToolCallAlreadyStarted(call.id, refused)

    async def finish_tool_call(
        self, session_id: str, call: ToolCall, message: ChatMessage, *, is_error: bool
    ) -> None:
        """In one transaction: the call `done` with its result, and its tool message appended."""
        async with self._transaction("finish_tool_call") as conn:
            session = await self._session_row(conn, session_id)
            row = await _one(
                conn,
                "SELECT * FROM tool_calls WHERE session_id = ? AND message_seq = ? AND call_id = ?",
                (session_id, session["last_calls_seq"], call.id),
            )
            if row is None:
                raise UnknownCall(call.id, session_id)
            current = _call(row)
            if current.status != "executing":
                raise StoreError(
                    f"tool call {call.id!r} of session {session_id!r} is {current.status}, "
                    "not executing; its result was not recorded"
                )
            await conn.execute(
                "UPDATE tool_calls SET status = 'done', result = ?, is_error = ?, finished_at = ? "
                "WHERE id = ?",
                (message.content, int(is_error), self._now(), current.id),
            )
            await self._append(conn, session_id, [message])
            await self._write_audit(
                conn,
                "execution_end",
                actor=session["requester"],
                session_id=session_id,
                call_id=call.id,
                details={
                    "ledger_id": current.id,
                    "tool": current.name,
                    "is_error": is_error,
                    "result_chars": len(message.content or ""),
                },
            )

    # -- the ledger -----------------------------------------------------------------------------

    async def get_call(self, ledger_id: str) -> ToolCallRow | None:
        async with self._reading("get_call") as conn:
            row = await _one(conn, "SELECT * FROM tool_calls WHERE id = ?", (ledger_id,))
        return None if row is None else _call(row)

    async def find_call(self, session_id: str, call_id: str) -> ToolCallRow | None:
        """The latest ledger row for a provider call id in a session."""
        async with self._reading("find_call") as conn:
            row = await _one(
                conn,
                "SELECT * FROM tool_calls WHERE session_id = ? AND call_id = ? "
                "ORDER BY message_seq DESC LIMIT 1",
                (session_id, call_id),
            )
        return None if row is None else _call(row)

    async def batch_calls(self, session_id: str) -> list[ToolCallRow]:
        """The rows of the session's latest paused batch, in the model's order."""
        async with self._reading("batch_calls") as conn:
            rows = await _all(
                conn,
                "SELECT t.* FROM tool_calls AS t JOIN sessions AS s ON t.batch_id = s.batch_id "
                "WHERE s.id = ? ORDER BY t.position",
                (session_id,),
            )
        return [_call(row) for row in rows]

    async def set_card(self, ledger_id: str, channel: str, ts: str) -> None:
        """Where the call's Approve/Reject card was posted, so it can be updated later."""
        async with self._transaction("set_card") as conn:
            cursor = await conn.execute(
                "UPDATE tool_calls SET card_channel = ?, card_ts = ? WHERE id = ?",
                (channel, ts, ledger_id),
            )
            if cursor.rowcount == 0:
                raise UnknownCall(ledger_id)

    async def set_expiry(
        self, ledger_id: str, expires_at: datetime, *, ttl: str | None = None
    ) -> None:
        """When an undecided gated call expires; `ttl` in words defaults to the time left now."""
        words = ttl or format_duration(aware(expires_at) - aware(self._clock()), approximate=True)
        async with self._transaction("set_expiry") as conn:
            cursor = await conn.execute(
                "UPDATE tool_calls SET expires_at = ?, ttl = ? WHERE id = ?",
                (to_db(expires_at), words, ledger_id),
            )
            if cursor.rowcount == 0:
                raise UnknownCall(ledger_id)

    async def decide(
        self,
        ledger_id: str,
        decision: Literal["approved", "rejected"],
        *,
        user_id: str,
        team_id: str | None = None,
        reason: str | None = None,
        required_approvals: int = 1,
        rule: str | None = None,
    ) -> DecisionOutcome:
        """Record a decision if the call is still pending: first writer wins.

        An approval adds `user_id` to the call's approvals (distinct users) and approves the call
        once there are `required_approvals` of them; one rejection rejects it. A call past its
        expiry is expired here rather than decided. Audited either way ("decision" or "refusal",
        with `rule` in the details). `why` tells the loser who won, or how many approvals are
        still missing.
        """
        if decision not in ("approved", "rejected"):
            raise ValueError(f"decision must be 'approved' or 'rejected', not {decision!r}")
        if required_approvals < 1:
            raise ValueError(f"required_approvals must be at least 1, not {required_approvals!r}")
        async with self._transaction("decide") as conn:
            row = await self._call_row(conn, ledger_id)
            clock = aware(self._clock())
            now = to_db(clock)
            why: str | None = None
            if not row.needs_approval:
                why = "this call needs no approval; it runs once the batch is decided"
            elif row.status == "pending" and row.expires_at is not None and row.expires_at <= clock:
                row = await self._expire(conn, row, now)
                why = _already(row)
            elif row.status != "pending":
                why = _already(row)
            elif decision == "approved" and user_id in row.approvals:
                why = "you already approved"
            common = {
                "ledger_id": ledger_id,
                "tool": row.name,
                "digest": row.digest,
                "decision": decision,
                "rule": rule,
                "reason": reason,
                "team_id": team_id,
            }
            if why is not None:
                await self._write_audit(
                    conn,
                    "refusal",
                    actor=user_id,
                    session_id=row.session_id,
                    call_id=row.call_id,
                    details={**common, "why": why},
                )
                return DecisionOutcome(recorded=False, row=row, why=why)

            approvals = row.approvals
            final = True
            if decision == "approved":
                approvals = (*approvals, user_id)
                final = len(approvals) >= required_approvals
            if final:
                await conn.execute(
                    "UPDATE tool_calls SET status = ?, decided_by = ?, decided_team = ?, "
                    "decided_at = ?, reason = ?, approvals = ? WHERE id = ? AND status = 'pending'",
                    (decision, user_id, team_id, now, reason, json.dumps(approvals), ledger_id),
                )
            else:
                await conn.execute(
                    "UPDATE tool_calls SET approvals = ? WHERE id = ? AND status = 'pending'",
                    (json.dumps(approvals), ledger_id),
                )
                missing = required_approvals - len(approvals)
                why = (
                    f"{len(approvals)} of {required_approvals} approvals; "
                    f"waiting for {missing} more"
                )
            await self._write_audit(
                conn,
                "decision",
                actor=user_id,
                session_id=row.session_id,
                call_id=row.call_id,
                details={
                    **common,
                    "approvals": len(approvals),
                    "required_approvals": required_approvals,
                    "final": final,
                },
            )
            return DecisionOutcome(
                recorded=True, row=await self._call_row(conn, ledger_id), why=why
            )

    async def _expire(self, conn: aiosqlite.Connection, row: ToolCallRow, now: str) -> ToolCallRow:
        ttl = row.ttl
        if ttl is None and row.expires_at is not None:
            ttl = format_duration(row.expires_at - row.created_at, approximate=True)
        await conn.execute(
            "UPDATE tool_calls SET status = 'expired', decided_at = ?, ttl = ? "
            "WHERE id = ? AND status = 'pending'",
            (now, ttl, row.id),
        )
        await self._write_audit(
            conn,
            "expiry",
            actor=None,
            session_id=row.session_id,
            call_id=row.call_id,
            details={"ledger_id": row.id, "tool": row.name, "ttl": ttl},
        )
        return await self._call_row(conn, row.id)

    async def expire_due(self, now: datetime | None = None) -> list[ToolCallRow]:
        """Expire every undecided gated call whose time is up; returns them (now `expired`)."""
        moment = to_db(now if now is not None else self._clock())
        async with self._transaction("expire_due") as conn:
            rows = await _all(
                conn,
                "SELECT * FROM tool_calls WHERE status = 'pending' AND needs_approval = 1 "
                "AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at",
                (moment,),
            )
            return [await self._expire(conn, _call(row), moment) for row in rows]

    async def due_reminders(
        self, before: timedelta, now: datetime | None = None
    ) -> list[ToolCallRow]:
        """Undecided gated calls that expire within `before` and were not reminded of yet;
        marks them reminded (audited), so each reminder goes out once."""
        moment = now if now is not None else self._clock()
        async with self._transaction("due_reminders") as conn:
            rows = await _all(
                conn,
                "SELECT * FROM tool_calls WHERE status = 'pending' AND needs_approval = 1 "
                "AND reminded_at IS NULL AND expires_at IS NOT NULL "
                "AND expires_at > ? AND expires_at <= ? ORDER BY expires_at",
                (to_db(moment), to_db(moment + before)),
            )
            reminded = []
            for row in rows:
                call = _call(row)
                await conn.execute(
                    "UPDATE tool_calls SET reminded_at = ? WHERE id = ?", (to_db(moment), call.id)
                )
                await self._write_audit(
                    conn,
                    "reminder",
                    actor=None,
                    session_id=call.session_id,
                    call_id=call.call_id,
                    details={"ledger_id": call.id, "tool": call.name},
                )
                reminded.append(await self._call_row(conn, call.id))
            return reminded

    async def next_expiry(self) -> datetime | None:
        """When the next undecided gated call expires, so a sweeper knows how long to sleep."""
        async with self._reading("next_expiry") as conn:
            row = await _one(
                conn,
                "SELECT MIN(expires_at) FROM tool_calls WHERE status = 'pending' "
                "AND needs_approval = 1 AND expires_at IS NOT NULL",
            )
        return None if row is None or row[0] is None else datetime.fromisoformat(row[0])

    async def responses_for_batch(
        self, session_id: str, *, mention: Callable[[str], str] = _plain
    ) -> list[ToolApprovalResponse]:
        """The decisions of the latest batch's gated calls, as the resume needs them.

        `mention` spells the decider's user id for the model ("rejected by …"); the store keeps
        ids plain, so a Slack caller passes its own mention markup.
        """
        responses: list[ToolApprovalResponse] = []
        for row in await self.batch_calls(session_id):
            if not row.needs_approval:
                continue
            decided_by = mention(row.decided_by) if row.decided_by else None
            if row.status in ("approved", "rejected"):
                responses.append(
                    ToolApprovalResponse(
                        row.call_id, row.status, reason=row.reason, decided_by=decided_by
                    )
                )
            elif row.status == "expired":
                responses.append(
                    ToolApprovalResponse.expire(row.call_id, row.ttl or "the time limit")
                )
        return responses

    async def pending_approvals(self) -> list[PendingApproval]:
        """Every gated call still waiting for decisions in a paused run, oldest first."""
        async with self._reading("pending_approvals") as conn:
            rows = await _all(
                conn,
                "SELECT t.* FROM tool_calls AS t JOIN sessions AS s "
                "ON s.id = t.session_id AND s.batch_id = t.batch_id "
                "WHERE t.status = 'pending' AND t.needs_approval = 1 "
                "AND s.state = 'awaiting_approval' ORDER BY t.created_at, t.position",
            )
            calls = [_call(row) for row in rows]
            sessions: dict[str, SessionRow] = {}
            for session_id in {c.session_id for c in calls}:
                sessions[session_id] = _session(await self._session_row(conn, session_id))
        return [PendingApproval(call=c, session=sessions[c.session_id]) for c in calls]

    async def sessions_awaiting_approval(self) -> list[SessionRow]:
        """Sessions paused for decisions; at start-up the bot resumes those already decided
        (a crash between the last decision and the resume claim leaves such a session)."""
        async with self._reading("sessions_awaiting_approval") as conn:
            rows = await _all(
                conn,
                "SELECT * FROM sessions WHERE state = 'awaiting_approval' ORDER BY updated_at",
            )
        return [_session(row) for row in rows]

    # -- cancelling a paused run ----------------------------------------------------------------

    async def cancel_batch(
        self,
        session_id: str,
        *,
        user_id: str,
        batch_id: str | None = None,
        team_id: str | None = None,
        via: str = "message",
        rule: str | None = None,
    ) -> CancelOutcome:
        """End a run that waits for approval, without running anything of its batch.

        One transaction, guarded by a conditional update of the session from
        `awaiting_approval` to `idle`: of a cancel racing with the last decision's resume claim
        (or another cancel), exactly one wins. Every undecided or approved call of the batch
        becomes `cancelled` and every call of the batch gets its one tool message (gated:
        `CANCELLED_MESSAGE`; held or approved: `CANCELLED_NOT_RUN_MESSAGE`; already rejected or
        expired: what the model would have been told), so the history stays valid. With
        `batch_id`, the cancel applies only if that is still the session's paused batch (a card
        of an earlier request cannot cancel a later one). Audited ("cancel" per call, or a
        "refusal").
        """
        who = _mention(user_id)
        reason = f"cancelled by {who}"
        async with self._transaction("cancel_batch") as conn:
            session = await self._session_row(conn, session_id)
            current = session["batch_id"]
            why: str | None = None
            if batch_id is not None and batch_id != current:
                why = "this card belongs to an earlier request in the thread"
            else:
                cursor = await conn.execute(
                    "UPDATE sessions SET state = 'idle', error = NULL, updated_at = ? "
                    "WHERE id = ? AND state = 'awaiting_approval' AND batch_id IS ?",
                    (self._now(), session_id, current),
                )
                if cursor.rowcount == 0:
                    why = f"the run is no longer waiting for approval (it is {session['state']})"
            before = [
                _call(row)
                for row in await _all(
                    conn,
                    "SELECT * FROM tool_calls WHERE batch_id = ? ORDER BY position",
                    (batch_id if batch_id is not None else current,),
                )
            ]
            if why is not None:
                await self._write_audit(
                    conn,
                    "refusal",
                    actor=user_id,
                    session_id=session_id,
                    details={"action": "cancel", "via": via, "why": why, "rule": rule},
                )
                return CancelOutcome(cancelled=False, rows=before, why=why)

            now = self._now()
            by_call = {row.call_id: row for row in before}
            for row in before:
                if row.status not in ("pending", "approved"):
                    continue
                await conn.execute(
                    "UPDATE tool_calls SET status = 'cancelled', decided_by = ?, decided_team = ?, "
                    "decided_at = ?, reason = ? WHERE id = ? AND status = ?",
                    (user_id, team_id, now, reason, row.id, row.status),
                )
                await self._write_audit(
                    conn,
                    "cancel",
                    actor=user_id,
                    session_id=session_id,
                    call_id=row.call_id,
                    details={
                        "ledger_id": row.id,
                        "batch_id": row.batch_id,
                        "tool": row.name,
                        "digest": row.digest,
                        "previous_status": row.status,
                        "via": via,
                        "rule": rule,
                    },
                )
            answers: list[ChatMessage] = []
            seq = session["last_calls_seq"]
            if seq is not None:
                tail = await _all(
                    conn,
                    "SELECT body FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq",
                    (session_id, seq),
                )
                for call in pending_tool_calls([ChatMessage.from_json(r[0]) for r in tail]):
                    answers.append(
                        ChatMessage.tool(_cancel_answer(by_call.get(call.id), who), call.id)
                    )
            if answers:
                await self._append(conn, session_id, answers)
            after = [await self._call_row(conn, row.id) for row in before]
            return CancelOutcome(cancelled=True, rows=after)

    # -- the run queue --------------------------------------------------------------------------

    async def enqueue(
        self,
        session_id: str,
        *,
        requester: str,
        text: str,
        message_ts: str | None = None,
    ) -> EnqueueOutcome:
        """Queue a message that should start a run in its session, unless the session is busy.

        Busy: its run is active or waits for approval, or another message of the thread is
        already queued (one run per thread, DESIGN.md). Checked and written in one transaction.
        """
        async with self._transaction("enqueue") as conn:
            session = _session(await self._session_row(conn, session_id))
            waiting = await _one(
                conn,
                "SELECT * FROM run_queue WHERE session_id = ? AND state = 'queued' "
                "ORDER BY id LIMIT 1",
                (session_id,),
            )
            if session.state not in ("idle", "failed") or waiting is not None:
                return EnqueueOutcome(
                    item=None, session=session, waiting=None if waiting is None else _item(waiting)
                )
            cursor = await conn.execute(
                "INSERT INTO run_queue (session_id, channel_id, requester, text, message_ts, "
                "state, enqueued_at) VALUES (?, ?, ?, ?, ?, 'queued', ?)",
                (session_id, session.channel_id, requester, text, message_ts, self._now()),
            )
            row = await _one(conn, "SELECT * FROM run_queue WHERE id = ?", (cursor.lastrowid,))
            assert row is not None
            return EnqueueOutcome(item=_item(row), session=session)

    async def claim_queued(self, channel_id: str, *, limit: int) -> QueueItem | None:
        """Start the channel's oldest queued message if fewer than `limit` of the channel's
        sessions are running or resuming (paused runs waiting for approval do not count).

        One transaction: the item becomes `started` and its session `running` with the item's
        requester, so concurrent dispatchers (tasks or processes) never exceed the limit and
        never start an item twice. None when the channel is full or nothing waits.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit!r}")
        async with self._transaction("claim_queued") as conn:
            busy = await _one(
                conn,
                "SELECT COUNT(*) FROM sessions WHERE channel_id = ? "
                "AND state IN ('running', 'resuming')",
                (channel_id,),
            )
            if busy is not None and int(busy[0]) >= limit:
                return None
            row = await _one(
                conn,
                "SELECT q.* FROM run_queue AS q JOIN sessions AS s ON s.id = q.session_id "
                "WHERE q.channel_id = ? AND q.state = 'queued' AND s.state IN ('idle', 'failed') "
                "ORDER BY q.id LIMIT 1",
                (channel_id,),
            )
            if row is None:
                return None
            item = _item(row)
            now = self._now()
            seq = await _one(
                conn,
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?",
                (item.session_id,),
            )
            await conn.execute(
                "UPDATE run_queue SET state = 'started', started_at = ?, history_seq = ? "
                "WHERE id = ? AND state = 'queued'",
                (now, 0 if seq is None else int(seq[0]), item.id),
            )
            cursor = await conn.execute(
                "UPDATE sessions SET state = 'running', requester = ?, error = NULL, "
                "updated_at = ? WHERE id = ? AND state IN ('idle', 'failed')",
                (item.requester, now, item.session_id),
            )
            if cursor.rowcount != 1:  # the SELECT above joined on this very condition
                raise StoreError(f"session {item.session_id!r} changed under claim_queued")
            started = await _one(conn, "SELECT * FROM run_queue WHERE id = ?", (item.id,))
            assert started is not None
            return _item(started)

    async def release_queued(self, item_id: int) -> None:
        """Undo `claim_queued` for a run that could not be started (the bot is shutting down)."""
        async with self._transaction("release_queued") as conn:
            row = await _one(conn, "SELECT * FROM run_queue WHERE id = ?", (item_id,))
            if row is None or row["state"] != "started":
                return
            await conn.execute(
                "UPDATE run_queue SET state = 'queued', started_at = NULL, history_seq = NULL "
                "WHERE id = ?",
                (item_id,),
            )
            await conn.execute(
                "UPDATE sessions SET state = 'idle', updated_at = ? "
                "WHERE id = ? AND state = 'running'",
                (self._now(), row["session_id"]),
            )

    async def finish_queued(self, item_id: int) -> None:
        """The item's run ended (answered, failed or paused for approval)."""
        async with self._transaction("finish_queued") as conn:
            await conn.execute(
                "UPDATE run_queue SET state = 'done', finished_at = ? "
                "WHERE id = ? AND state = 'started'",
                (self._now(), item_id),
            )

    async def cancel_queued(self, session_id: str, *, user_id: str) -> QueueItem | None:
        """Withdraw the thread's queued message before its run starts; None if none waits."""
        async with self._transaction("cancel_queued") as conn:
            row = await _one(
                conn,
                "SELECT * FROM run_queue WHERE session_id = ? AND state = 'queued' "
                "ORDER BY id LIMIT 1",
                (session_id,),
            )
            if row is None:
                return None
            await conn.execute(
                "UPDATE run_queue SET state = 'cancelled', finished_at = ? "
                "WHERE id = ? AND state = 'queued'",
                (self._now(), row["id"]),
            )
            await self._write_audit(
                conn,
                "cancel",
                actor=user_id,
                session_id=session_id,
                details={"queue_item": row["id"], "requester": row["requester"], "via": "queue"},
            )
            updated = await _one(conn, "SELECT * FROM run_queue WHERE id = ?", (row["id"],))
            assert updated is not None
            return _item(updated)

    async def queued_item(self, session_id: str) -> QueueItem | None:
        """The thread's message waiting in the queue, if any."""
        async with self._reading("queued_item") as conn:
            row = await _one(
                conn,
                "SELECT * FROM run_queue WHERE session_id = ? AND state = 'queued' "
                "ORDER BY id LIMIT 1",
                (session_id,),
            )
        return None if row is None else _item(row)

    async def queue_position(self, item_id: int) -> int | None:
        """How many messages of the same channel are queued ahead; None if no longer queued."""
        async with self._reading("queue_position") as conn:
            row = await _one(conn, "SELECT * FROM run_queue WHERE id = ?", (item_id,))
            if row is None or row["state"] != "queued":
                return None
            ahead = await _one(
                conn,
                "SELECT COUNT(*) FROM run_queue WHERE channel_id = ? AND state = 'queued' "
                "AND id < ?",
                (row["channel_id"], item_id),
            )
        return 0 if ahead is None else int(ahead[0])

    async def queue_items(
        self, *, channel_id: str | None = None, states: Collection[str] | None = None
    ) -> list[QueueItem]:
        """Queue items in arrival order, optionally of one channel and in some states."""
        sql, params = "SELECT * FROM run_queue WHERE 1 = 1", []
        if channel_id is not None:
            sql += " AND channel_id = ?"
            params.append(channel_id)
        if states is not None:
            sql += f" AND state IN ({', '.join('?' for _ in states)})"
            params.extend(states)
        async with self._reading("queue_items") as conn:
            rows = await _all(conn, sql + " ORDER BY id", params)
        return [_item(row) for row in rows]

    async def queued_channels(self) -> list[str]:
        """Channels with messages waiting, the longest-waiting first."""
        async with self._reading("queued_channels") as conn:
            rows = await _all(
                conn,
                "SELECT channel_id FROM run_queue WHERE state = 'queued' "
                "GROUP BY channel_id ORDER BY MIN(id)",
            )
        return [str(row[0]) for row in rows]

    async def requeue_interrupted(self) -> list[QueueItem]:
        """At start-up, before `recover()`: items whose run was started but had not yet stored
        its first message when OpsGate stopped go back to the queue (nothing of them happened,
        so nothing is lost or done twice); the other started items are marked done, and
        `recover()` handles their sessions. Returns the requeued items."""
        requeued: list[QueueItem] = []
        async with self._transaction("requeue_interrupted") as conn:
            started = [
                _item(row)
                for row in await _all(
                    conn, "SELECT * FROM run_queue WHERE state = 'started' ORDER BY id"
                )
            ]
            now = self._now()
            for item in started:
                stored = await _one(
                    conn,
                    "SELECT 1 FROM messages WHERE session_id = ? AND seq >= ? LIMIT 1",
                    (item.session_id, item.history_seq or 0),
                )
                if stored is not None:
                    await conn.execute(
                        "UPDATE run_queue SET state = 'done', finished_at = ? WHERE id = ?",
                        (now, item.id),
                    )
                    continue
                await conn.execute(
                    "UPDATE run_queue SET state = 'queued', started_at = NULL, history_seq = NULL "
                    "WHERE id = ?",
                    (item.id,),
                )
                await conn.execute(
                    "UPDATE sessions SET state = 'idle', updated_at = ? "
                    "WHERE id = ? AND state IN ('running', 'resuming')",
                    (now, item.session_id),
                )
                row = await _one(conn, "SELECT * FROM run_queue WHERE id = ?", (item.id,))
                assert row is not None
                requeued.append(_item(row))
        return requeued

    # -- audit ----------------------------------------------------------------------------------

    async def audit(
        self,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one audit row (the log is append-only: a trigger refuses updates and deletes)."""
        async with self._transaction("audit") as conn:
            await self._write_audit(
                conn, event, actor=actor, session_id=session_id, call_id=call_id, details=details
            )

    async def audit_rows(self, *, since: datetime | None = None) -> list[AuditRow]:
        """Audit rows in the order they were written, from `since` on if given."""
        async with self._reading("audit_rows") as conn:
            if since is None:
                rows = await _all(conn, "SELECT * FROM audit ORDER BY id")
            else:
                rows = await _all(
                    conn, "SELECT * FROM audit WHERE at >= ? ORDER BY id", (to_db(since),)
                )
        return [_audit(row) for row in rows]

    # -- Slack retries --------------------------------------------------------------------------

    async def first_sighting(self, event_id: str) -> bool:
        """True the first time an event id is seen (Slack retries deliveries); forgets in a day."""
        now = self._clock()
        async with self._transaction("first_sighting") as conn:
            await conn.execute(
                "DELETE FROM seen_events WHERE seen_at < ?", (to_db(now - SEEN_EVENT_TTL),)
            )
            cursor = await conn.execute(
                "INSERT OR IGNORE INTO seen_events (event_id, seen_at) VALUES (?, ?)",
                (event_id, to_db(now)),
            )
            return cursor.rowcount == 1

    # -- crash recovery -------------------------------------------------------------------------

    async def recover(self) -> list[RecoveredSession]:
        """Repair what a crash left behind; call once at start-up, before serving.

        Every `executing` call becomes `interrupted` (outcome unknown, never run again) and is
        answered with `INTERRUPTED_MESSAGE`; the other unanswered calls of its batch get
        `NOT_RUN_MESSAGE`, so every `tool_call_id` is answered. Those sessions, and sessions
        left `running`/`resuming` by a crashed run, become `idle`. Sessions awaiting approval are
        left alone: their cards still work.
        """
        recovered: list[RecoveredSession] = []
        async with self._transaction("recover") as conn:
            executing = [
                _call(row)
                for row in await _all(
                    conn,
                    "SELECT * FROM tool_calls WHERE status = 'executing' "
                    "ORDER BY session_id, message_seq, position",
                )
            ]
            stuck = await _all(
                conn, "SELECT id FROM sessions WHERE state IN ('running', 'resuming') ORDER BY id"
            )
            session_ids = sorted({row.session_id for row in executing} | {row[0] for row in stuck})
            for session_id in session_ids:
                session = await self._session_row(conn, session_id)
                now = self._now()
                interrupted = [row for row in executing if row.session_id == session_id]
                for row in interrupted:
                    await conn.execute(
                        "UPDATE tool_calls SET status = 'interrupted', result = ?, is_error = 1, "
                        "finished_at = ? WHERE id = ?",
                        (INTERRUPTED_MESSAGE, now, row.id),
                    )
                answers: list[ChatMessage] = []
                not_run: list[str] = []
                seq = session["last_calls_seq"]
                if seq is not None:
                    tail = await _all(
                        conn,
                        "SELECT body FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq",
                        (session_id, seq),
                    )
                    was_running = {row.call_id for row in interrupted if row.message_seq == seq}
                    for call in pending_tool_calls([ChatMessage.from_json(r[0]) for r in tail]):
                        if call.id in was_running:
                            answers.append(ChatMessage.tool(INTERRUPTED_MESSAGE, call.id))
                        else:
                            answers.append(ChatMessage.tool(NOT_RUN_MESSAGE, call.id))
                            not_run.append(call.id)
                if answers:
                    await self._append(conn, session_id, answers)
                await conn.execute(
                    "UPDATE sessions SET state = 'idle', error = NULL, updated_at = ? WHERE id = ?",
                    (now, session_id),
                )
                for row in interrupted:
                    await self._write_audit(
                        conn,
                        "interrupted",
                        actor=None,
                        session_id=session_id,
                        call_id=row.call_id,
                        details={"ledger_id": row.id, "tool": row.name, "not_run": not_run},
                    )
                if not interrupted:
                    await self._write_audit(
                        conn,
                        "interrupted",
                        actor=None,
                        session_id=session_id,
                        details={"previous_state": session["state"], "not_run": not_run},
                    )
                recovered.append(
                    RecoveredSession(
                        session=_session(await self._session_row(conn, session_id)),
                        interrupted=[await self._call_row(conn, row.id) for row in interrupted],
                        not_run=not_run,
                    )
                )
        return recovered


def _cancel_answer(row: ToolCallRow | None, who: str) -> str:
    """The tool message of one call of a cancelled batch (its status as before the cancel)."""
    if row is None or not row.needs_approval or row.status == "approved":
        return CANCELLED_NOT_RUN_MESSAGE.format(user=who)
    decided_by = _mention(row.decided_by) if row.decided_by else None
    if row.status == "rejected":
        return ToolApprovalResponse.reject(
            row.call_id, row.reason, decided_by=decided_by
        ).tool_message_text()
    if row.status == "expired":
        return ToolApprovalResponse.expire(
            row.call_id, row.ttl or "the time limit"
        ).tool_message_text()
    return CANCELLED_MESSAGE.format(user=who)


def _check_states(states: Collection[str]) -> None:
    unknown = sorted(set(states) - _RUN_STATES)
    if unknown:
        raise ValueError(
            f"unknown run state(s) {unknown!r}; expected one of {sorted(_RUN_STATES)!r}"
        )
