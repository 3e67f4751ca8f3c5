"""`StoreCore`: what every operation of the store stands on, for either database.

It holds the `Db` (the seam, `bot.store.db`), the clock, how people are named, and this
store's replica instance (PostgreSQL only; None on SQLite), and the steps several operations
take inside one transaction: reading a session or a call (locked for writing where the
database needs row locks), appending to the history, writing an audit row, and turning rows
into the backend-neutral models. The operations themselves live in the modules named for their
concern (`sessions`, `ledger`, `decisions`, `edits`, `queue`, `recovery`, `audit`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from pydantic_core import PydanticSerializationError

from agent_core import replace_lone_surrogates, replace_lone_surrogates_in
from agent_core.messages import ChatMessage

from ._outbox_rows import card_redraw, put_rows
from .chain import (
    KEY_VARIABLE,
    ChainHead,
    audit_key,
    canonical_hash,
    key_mark,
    key_mismatch,
    last_row_mark,
    printed_time,
)
from .db import Db, Row, Tx, aware, json_text
from .errors import StoreError, UnknownCall, UnknownSession
from .models import AuditRow, QueueItem, SessionRow, ToolCallRow
from .rules import Person, expiry_ttl
from .schema import SCHEMA_VERSION, steps

__all__ = ["StoreCore", "message_body"]

logger = logging.getLogger("opsgate.store")

_ROW = (
    "INSERT INTO audit (id, at, event, actor, session_id, call_id, details, seq, prev_hash, "
    "hash) SELECT :id, :at, :event, :actor, :session_id, :call_id, :details, :seq, "
    ":prev_hash, :hash FROM {head} WHERE head.seq = :after AND head.hash = :prev_hash "
    "AND (head.seq = 0 OR head.key_fingerprint = :keyed)"
)
_APPEND = {
    # Not a CTE on SQLite: Python's sqlite3 counts rows only for statements that begin with
    # INSERT, UPDATE, DELETE or REPLACE.
    "sqlite": _ROW.format(head="audit_chain AS head"),
    "postgresql": "WITH head AS MATERIALIZED "
    "(SELECT seq, hash, key_fingerprint FROM audit_chain FOR UPDATE) " + _ROW.format(head="head"),
}
"""The next link, inserted only if the head is still the one it follows and the chain is
keyed as this writer is (else nothing: the store then reads the head, locked, and appends
after it, or refuses a key that is not the chain's). On PostgreSQL the head row is locked
first whatever it holds (materialized, so the comparison sees the head after any wait, not
the one from before it)."""


MIGRATE_LOCK = 0x0F5_6A7E
"""Advisory lock key held while migrating (replicas starting together migrate one at a time)."""

_TURN_SECONDS = 1.0
"""Longest wait for the store's append turn (`_appending`) before appending without it."""


def message_body(message: ChatMessage) -> str:
    """The message's stored JSON; lone surrogates anywhere in it become U+FFFD, the last line
    against them (text from outside is cleaned where it enters, `agent_core.messages`), so a
    turn is saved instead of failing the write and the run on the database's UTF-8 encode."""
    try:
        return replace_lone_surrogates(message.to_json())
    except PydanticSerializationError:
        logger.warning("a %s message held lone surrogates; replaced by U+FFFD", message.role)
        raw = message.model_dump(mode="python", exclude_defaults=True)
        return ChatMessage.model_validate(replace_lone_surrogates_in(raw)).to_json()


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return False


def _link(head: ChainHead, fields: dict[str, Any], columns: tuple[Any, Any]) -> dict[str, Any]:
    """The append's parameters for the row after `head`: hashed as printed, stored as the
    columns take it (`columns`: time and details in the database's form)."""
    key = audit_key()
    link = fields | {"id": head.last_id + 1, "seq": head.seq + 1, "prev_hash": head.hash}
    link["hash"] = canonical_hash(link, key)
    link["at"], link["details"] = columns
    link["after"] = head.seq
    link["keyed"] = key_mark(key)
    return link


class StoreCore:
    """The database, the clock and the shared steps; an async context manager (entering opens
    the database and migrates it, leaving closes it). `migrate=False` opens without migrating
    (readers, and `opsgate migrate` itself, which asks first); a database newer than this code
    is refused either way."""

    def __init__(
        self,
        db: Db,
        *,
        clock: Callable[[], datetime],
        person: Person,
        chained: bool = True,
        migrate: bool = True,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self._db = db
        self._migrate_on_open = migrate
        self._clock = clock
        self._person = person
        self._instance_id: str | None = None
        self._chained = chained
        """False only for `bench/audit_chain.py`'s floor: audit rows as before the chain (no
        seq, no hash), on a database whose chain trigger the benchmark dropped."""
        self._head: tuple[Tx, ChainHead] | None = None
        """The link this store's last append wrote (committed or not), and its transaction."""
        self._appending = asyncio.Lock()
        """Held by an append from its first try until its link is written (`_known_head`)."""
        self._redraw_wake = wake
        """Called after the commit of a change that wrote a card's redraw (`_owe_redraw`): the
        outbox's sender looks at once rather than at its next poll."""

    async def _owe_redraw(self, tx: Tx, row: ToolCallRow) -> None:
        """Inside a change's transaction: owe the redraw of `row`'s card (a `CARD_REDRAW`
        outbox row), when it has one. Every change a card shows writes it, so the change and
        its redraw commit together, or neither does; the front end's sender draws the card
        from the call's state when it sends the row."""
        if row.card_ts and row.needs_approval:
            await put_rows(self._db, tx, [card_redraw(row.id, row.card_channel)], self._now())

    def _redraws_owed(self) -> None:
        """After the commit of a change that may have owed a redraw: wake the sender."""
        self._redraw_wake()

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
        """Open the database and bring its schema up to date. Prefer `async with`."""
        found = await self._db.open(SCHEMA_VERSION)
        if not self._migrate_on_open or found >= SCHEMA_VERSION:
            return
        try:
            await self._migrate()
        except BaseException:
            await self._db.close()
            raise

    async def _migrate(self) -> int:
        """Apply the missing migrations (`bot.store.schema.steps`); idempotent, and safe when
        processes or replicas start together: each transaction holds the migration lock
        (PostgreSQL; SQLite's write transaction is the only one already) and re-reads the
        version under it. SQLite commits each version on its own, PostgreSQL the whole line
        at once; a crash leaves a whole version either way. The version reached."""
        while True:
            async with self._db.transaction("migrate") as tx:
                await self._db.advisory_lock(tx, MIGRATE_LOCK)
                found = await self._db.version(tx, SCHEMA_VERSION)
                todo = steps(self._db.dialect, found)
                if not todo:
                    return found
                if self._db.dialect == "sqlite":
                    todo = todo[:1]
                for _version, statements in todo:
                    for statement in statements:
                        if isinstance(statement, str):
                            await tx.execute(statement)  # DDL: no `:name` parameters in it
                        else:
                            await statement(tx)
                reached = todo[-1][0]
                await self._db.set_version(tx, reached)
            logger.info("migrated %s to schema version %d", self._db.name, reached)

    async def close(self) -> None:
        await self._db.close()

    async def abort(self) -> None:
        """Drop the connections now, without waiting on the database (a stop while it does
        not answer); the store is closed after it."""
        await self._db.abort()

    def _moment(self) -> datetime:
        return aware(self._clock())

    def _now(self) -> Any:
        """Now, as the database stores time."""
        return self._db.time_in(self._clock())

    # -- rows to models --------------------------------------------------------------------------

    def _session_model(self, row: Row) -> SessionRow:
        return SessionRow.model_validate(dict(row))

    def _call_model(self, row: Row) -> ToolCallRow:
        data = dict(row)
        data["approvals"] = self._db.list_out(data["approvals"])
        return ToolCallRow.model_validate(data)

    def _queue_model(self, row: Row) -> QueueItem:
        return QueueItem.model_validate(dict(row))

    def _audit_model(self, row: Row) -> AuditRow:
        data = dict(row)
        data["details"] = self._db.json_out(data["details"])
        return AuditRow.model_validate(data)

    # -- steps shared by the operations (inside a transaction) ------------------------------------

    async def _locked_call(self, tx: Tx, ledger_id: str) -> ToolCallRow:
        """The call, locked for writing after its session (the order every writer keeps)."""
        unlocked = await self._call(tx, ledger_id)
        if not self._db.for_update:
            return unlocked  # the transaction is already the only writer
        await self._session(tx, unlocked.session_id, lock=True)
        return await self._call(tx, ledger_id, lock=True)

    async def _mark(
        self,
        tx: Tx,
        row: ToolCallRow,
        event: str,
        update: str,
        values: dict[str, Any],
        *,
        redraw: bool = False,
    ) -> ToolCallRow:
        """What OpsGate itself does to a waiting call (expire it, remind about it): the
        `update` of its row (`:id` is the row's), its audit row (`event`, with the
        `values` other than `now`), and the row read back; `redraw`: the card's redraw is
        owed with it (an expiry)."""
        await tx.execute(update, {**values, "id": row.id})
        if redraw:
            await self._owe_redraw(tx, row)
        details = {"ledger_id": row.id, "tool": row.name}
        details |= {k: v for k, v in values.items() if k != "now"}
        await self._audit_call(tx, event, row, details, actor=None)
        return await self._call(tx, row.id)

    async def _expire(self, tx: Tx, row: ToolCallRow, now: datetime) -> ToolCallRow:
        return await self._mark(
            tx,
            row,
            "expiry",
            "UPDATE tool_calls SET status = 'expired', decided_at = :now, ttl = :ttl "
            "WHERE id = :id AND status = 'pending'",
            {"now": self._db.time_in(now), "ttl": expiry_ttl(row)},
            redraw=True,
        )

    async def _expire_if_due(self, tx: Tx, row: ToolCallRow) -> ToolCallRow:
        """The row expired (re-read) if it is undecided past its time, else `row` itself."""
        now = self._moment()
        if row.status == "pending" and row.expires_at is not None and row.expires_at <= now:
            return await self._expire(tx, row, now)
        return row

    async def _session(self, tx: Tx, session_id: str, *, lock: bool = False) -> Row:
        """The session's row; `lock`: for writing (the session before its calls, always)."""
        row = await tx.fetch_one(
            "SELECT * FROM sessions WHERE id = :id" + (self._db.for_update if lock else ""),
            {"id": session_id},
        )
        if row is None:
            raise UnknownSession(session_id)
        return row

    async def _call(self, tx: Tx, ledger_id: str, *, lock: bool = False) -> ToolCallRow:
        row = await tx.fetch_one(
            "SELECT * FROM tool_calls WHERE id = :id" + (self._db.for_update if lock else ""),
            {"id": ledger_id},
        )
        if row is None:
            raise UnknownCall(ledger_id)
        return self._call_model(row)

    async def _append(self, tx: Tx, session_id: str, messages: Sequence[ChatMessage]) -> int:
        """Insert messages after the last one; returns the seq of the first. Cost: O(log n).

        The `UPDATE sessions` comes first: it locks the session row (PostgreSQL), so two
        appends to one session take turns and never compute the same next seq.
        """
        now = self._now()
        touched = await tx.execute(
            "UPDATE sessions SET updated_at = :now WHERE id = :id", {"now": now, "id": session_id}
        )
        if touched == 0:
            raise UnknownSession(session_id)
        first = int(
            await tx.fetch_value(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = :id",
                {"id": session_id},
            )
        )
        await tx.execute_many(
            "INSERT INTO messages (session_id, seq, body, created_at) "
            "VALUES (:session_id, :seq, :body, :now)",
            [
                {"session_id": session_id, "seq": first + i, "body": message_body(m), "now": now}
                for i, m in enumerate(messages)
            ],
        )
        calls_at = [
            first + i for i, m in enumerate(messages) if m.role == "assistant" and m.tool_calls
        ]
        if calls_at:
            await tx.execute(
                "UPDATE sessions SET last_calls_seq = :seq WHERE id = :id",
                {"seq": calls_at[-1], "id": session_id},
            )
        return first

    async def _latest_batch_messages(
        self, tx: Tx, session_id: str, seq: int | None
    ) -> list[ChatMessage]:
        """The history from the last tool-call message on (what `close_batch` needs)."""
        if seq is None:
            return []
        rows = await tx.fetch_all(
            "SELECT body FROM messages WHERE session_id = :id AND seq >= :seq ORDER BY seq",
            {"id": session_id, "seq": seq},
        )
        return [ChatMessage.from_json(row[0]) for row in rows]

    async def _write_audit(
        self,
        tx: Tx,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one row to the chain (`bot/store/chain.py`), in the caller's transaction.

        One statement when the head is known (`_known_head`: this store's last link, on
        PostgreSQL perhaps not committed yet; the transaction's own, if it appended before):
        the insert is conditional on the head being that one, and its trigger advances the
        head (refusing a row that is not the next link). Otherwise, or when it inserted
        nothing (the head moved: another store or replica, a rolled-back append), the head is
        read, locked (PostgreSQL; SQLite's write transaction is already the only one), and the
        row appended after it. Replicas append one at a time, and a rolled-back write leaves
        no gap. The row is
        hashed from the values in hand, as `opsgate audit --json` will print it."""
        if not self._chained:
            await self._write_unchained(tx, event, actor, session_id, call_id, details)
            return
        # The row as it will read back: UTC time, details through the JSON the column stores.
        text = json_text(dict(details or {}))
        stored = json.loads(text)
        if self._db.dialect == "postgresql" and _has_float(stored):
            # jsonb keeps numbers as numeric and prints 1e16 as 10000000000000000: hash what
            # it will give back (one more round trip, only when a float is there).
            stored = await tx.fetch_value("SELECT CAST(:details AS jsonb)", {"details": stored})
        at = self._moment().astimezone(UTC)
        fields = {
            "at": printed_time(at),
            "event": event,
            "actor": actor,
            "session_id": session_id,
            "call_id": call_id,
            "details": stored,
        }
        # SQLite stores the text itself (encoding what it decodes to gives the same text).
        column = text if self._db.dialect == "sqlite" else self._db.json_in(stored)
        columns = (self._db.time_in(at), column)
        append = _APPEND[self._db.dialect]
        if self._head is not None and self._head[0] is tx:
            # This transaction's own last link: it holds the head (PostgreSQL: locked).
            await self._append_after(tx, append, self._head[1], fields, columns)
            return
        try:
            # `asyncio.timeout`, not `wait_for`: no task per append (a fifth of the chain's
            # cost on the event loop when the turn is free, as it always is on SQLite).
            async with asyncio.timeout(_TURN_SECONDS):
                await self._appending.acquire()
        except TimeoutError:
            # A wait the database cannot see: this transaction may hold rows the one ahead
            # needs. Go to the head itself, where a cycle is a deadlock PostgreSQL breaks.
            await self._append_after(tx, append, None, fields, columns)
            return
        try:
            await self._append_after(tx, append, self._known_head(), fields, columns)
        finally:
            self._appending.release()

    def _known_head(self) -> ChainHead | None:
        """The head to try first: the link this store's last append wrote. On SQLite the write
        lock makes this transaction the only writer, so it is right unless another store on
        the file appended since. On PostgreSQL that link may not be committed yet: the insert
        waits on the head row's lock behind the transaction that wrote it and, once that one
        commits, follows it (no more round trips; the hash was computed before the lock). The
        store's appends from other transactions take turns (`_appending`) until their insert
        returns, so one waits on the head at a time behind the one it follows, and the next
        one knows its link; if that link rolls back or a replica appends meanwhile, the try
        writes nothing but has locked the head, which the store then reads."""
        return None if self._head is None else self._head[1]

    async def _append_after(
        self,
        tx: Tx,
        append: str,
        known: ChainHead | None,
        fields: dict[str, Any],
        columns: tuple[Any, Any],
    ) -> None:
        if known is not None and await self._try_append(tx, append, known, fields, columns):
            return
        head = await self._locked_head(tx)
        if not await self._try_append(tx, append, head, fields, columns):
            raise StoreError(f"the audit chain of {self._db.name!r} moved under its lock")

    async def _try_append(
        self, tx: Tx, append: str, head: ChainHead, fields: dict[str, Any], columns: tuple[Any, Any]
    ) -> bool:
        """Append after `head`; False (nothing written) if it is no longer the head."""
        row = _link(head, fields, columns)
        if await tx.execute(append, row) != 1:
            return False
        if head.seq == 0:  # the first row: the chain is keyed as its first writer is
            await tx.execute(
                "UPDATE audit_chain SET key_fingerprint = :keyed", {"keyed": row["keyed"]}
            )
        self._head = (tx, ChainHead(row["seq"], row["hash"], row["id"]))
        return True

    async def _locked_head(self, tx: Tx) -> ChainHead:
        head = await tx.fetch_one(
            "SELECT seq, hash, last_id, key_fingerprint FROM audit_chain" + self._db.for_update
        )
        if head is None:
            raise StoreError(f"the audit chain of {self._db.name!r} has no head (migrate it)")
        if int(head["seq"]) > 0:
            await self._check_key(tx, head["key_fingerprint"], int(head["seq"]))
        return ChainHead(int(head["seq"]), str(head["hash"]), int(head["last_id"]))

    async def _check_key(self, tx: Tx, keyed: str | None, seq: int) -> None:
        """Rows hashed with another key than the chain's would never verify: refused, not
        written. A head that records no key yet (upgraded without the key) takes this
        writer's, once that key verifies the last row."""
        key, name = audit_key(), self._db.name
        if keyed is None:
            keyed = await last_row_mark(tx, key)
            if keyed is None:
                raise StoreError(
                    f"cannot append to the audit chain of {name!r}: {KEY_VARIABLE} does not "
                    f"verify its last row (seq {seq}); set it to the key the chain is written with"
                )
            await tx.execute("UPDATE audit_chain SET key_fingerprint = :mark", {"mark": keyed})
        if (mismatch := key_mismatch(keyed, key)) is not None:
            raise StoreError(f"cannot append to the audit chain of {name!r}: {mismatch.why}")

    async def _write_unchained(
        self,
        tx: Tx,
        event: str,
        actor: str | None,
        session_id: str | None,
        call_id: str | None,
        details: Mapping[str, Any] | None,
    ) -> None:
        """The append without the chain (`chained=False`: the benchmark's floor only)."""
        await tx.execute(
            "INSERT INTO audit (at, event, actor, session_id, call_id, details) "
            "VALUES (:at, :event, :actor, :session_id, :call_id, :details)",
            {
                "at": self._now(),
                "event": event,
                "actor": actor,
                "session_id": session_id,
                "call_id": call_id,
                "details": self._db.json_in(dict(details or {})),
            },
        )

    async def _audit_call(
        self, tx: Tx, event: str, row: ToolCallRow, details: Mapping[str, Any], *, actor: str | None
    ) -> None:
        """An audit row about one ledger row (its session and provider call id)."""
        await self._write_audit(
            tx, event, actor=actor, session_id=row.session_id, call_id=row.call_id, details=details
        )
