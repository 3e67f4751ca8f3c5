"""`opsgate audit [--since WHEN] [--json]`: print the audit log, as a table or as JSON lines;
`opsgate audit --follow [--after SEQ] [--json]`: keep printing rows as they are written (from
after SEQ when given: where a restarted log shipper left off); `opsgate audit verify [--head H]`:
walk the chain (`bot/store/chain.py`). A row that cannot be read (edited by hand) is printed as
such, with its seq, and fails `verify`; it never stops the listing.

Audit rows hold untrusted text (tool arguments, rejection reasons), so the table escapes anything
a terminal could interpret; JSON lines are pure ASCII for the same reason.

The audit log as a table that fits the terminal (100 columns and up): long cells wrap inside
their column, each row names its channel and thread, and details are JSON, with values that were
stored as JSON text (a call's arguments) shown as the JSON they hold.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
import textwrap
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from ..settings import DatabaseURL, load_settings
from ..store import AuditRow, SQLiteStore, Store, StoreError, open_store
from ..store.chain import (
    AuditEntry,
    Broken,
    Intact,
    KeyMismatch,
    Unreadable,
    audit_key,
    printed,
    verify_chain,
)

__all__ = [
    "COLUMNS",
    "audit_command",
    "audit_table",
    "details_json",
    "parse_since",
    "printable",
    "run_audit",
    "run_follow",
    "run_verify",
    "unreadable_line",
]

COLUMNS = ("time (UTC)", "event", "actor", "channel/thread", "call", "details")
_MAX = {"event": 16, "actor": 16, "channel/thread": 26, "call": 14}
"""Widest each short column gets; longer values wrap."""
_INDENT = "    "


def printable(text: str) -> str:
    """Escape control characters (ANSI sequences included) so a row cannot drive the terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def details_json(details: Mapping[str, Any]) -> str:
    """Compact JSON of the details; a string holding a JSON object or array is shown decoded."""
    return json.dumps(
        {key: _decoded(value) for key, value in details.items()},
        ensure_ascii=False,
        sort_keys=True,
        separators=(", ", ": "),
    )


def _decoded(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def unreadable_line(row: Unreadable) -> str:
    """A row the store cannot read, as the listing shows it in its place."""
    seq = "?" if row.seq is None else str(row.seq)
    return f"seq {seq} (id {row.id}): this row cannot be read: {row.why}"


def audit_table(
    entries: Sequence[AuditEntry], where: Mapping[str, str], *, width: int = 100
) -> list[str]:
    """Lines of the table for a terminal `width` columns wide; `where` maps a session id to its
    "channel/thread". Each row is one line of short columns, then its details (JSON) wrapped
    below it, indented: details are long, and a column for them would leave them 20 wide.
    A row that cannot be read is one line saying so, with its seq, in its place."""
    heads = COLUMNS[:-1]
    rows = [row for row in entries if isinstance(row, AuditRow)]
    cells = [heads, *(_cells(row, where)[:-1] for row in rows)]
    widths = [
        min(max(len(line[i]) for line in cells), _MAX.get(heads[i], 10**6))
        for i in range(len(heads))
    ]
    out = [*_lines(heads, widths), _INDENT + COLUMNS[-1]]
    lines = iter(cells[1:])
    for row in entries:
        if isinstance(row, Unreadable):
            out += _wrap(printable(unreadable_line(row)), max(20, width))
            continue
        out += _lines(next(lines), widths)
        details = printable(details_json(row.details))
        out += [_INDENT + part for part in _wrap(details, max(20, width - len(_INDENT)))]
    return out


def _lines(cells: Sequence[str], widths: Sequence[int]) -> list[str]:
    """One table row, its long cells wrapped within their columns."""
    wrapped = [_wrap(cell, w) for cell, w in zip(cells, widths, strict=True)]
    return [
        "  ".join(
            (w[i] if i < len(w) else "").ljust(n) for w, n in zip(wrapped, widths, strict=True)
        ).rstrip()
        for i in range(max(len(w) for w in wrapped))
    ]


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def _cells(row: AuditRow, where: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(
        printable(cell)
        for cell in (
            f"{row.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}",
            row.event,
            row.actor or "-",
            where.get(row.session_id or "", "-"),
            row.call_id or "-",
            details_json(row.details),
        )
    )


_POLL = 0.5
"""How often `--follow` looks at an SQLite file (PostgreSQL wakes it at once: LISTEN)."""
_POSTGRES_POLL = 5.0
"""The look `--follow` takes on PostgreSQL even without a notification (one may be missed)."""
_RETRY = (0.5, 1.0, 2.0, 5.0)

_RELATIVE = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO date or time ("2024-05-01", "2024-05-01T09:30", "...+02:00"; UTC unless it says
    otherwise), or a span back from now ("90m", "2h", "7d", "1w", "1h30m")."""
    spelled = text.strip().lower()
    if spelled and _RELATIVE.sub("", spelled).strip() == "":
        span = timedelta()
        for count, unit in _RELATIVE.findall(spelled):
            span += timedelta(**{_UNITS[unit]: int(count)})
        return (now or datetime.now(UTC)) - span
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"cannot read {text!r} as a time: use an ISO date or time "
            "(2024-05-01, 2024-05-01T09:30Z) or a span back from now (30m, 2h, 7d, 1w)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _as_json(row: AuditEntry) -> str:
    data: dict[str, Any] = printed(row)
    return json.dumps(data, ensure_ascii=True, sort_keys=True)


async def _threads(store: Store, rows: list[AuditEntry]) -> dict[str, str]:
    """ "channel/thread" of each session the rows name."""
    where = {}
    named = {row.session_id for row in rows if isinstance(row, AuditRow) and row.session_id}
    for session_id in named:
        session = await store.get_session(session_id)
        if session is not None:
            where[session_id] = f"{session.channel_id}/{session.thread_ts}"
    return where


def _width(out: TextIO) -> int:
    """The terminal's width when printing to one; 100 columns otherwise (a pipe, a file)."""
    try:
        return os.get_terminal_size(out.fileno()).columns if out.isatty() else 100
    except (OSError, ValueError, io.UnsupportedOperation):
        return 100


@asynccontextmanager
async def _reader(db_path: Path | DatabaseURL) -> AsyncIterator[Store]:
    """The database opened for reading: never created, never migrated past what it is."""
    if isinstance(db_path, DatabaseURL):
        async with open_store(db_path, migrate=False) as store:
            if await store.schema_version() == 0:  # type: ignore[attr-defined]
                raise StoreError(
                    f"database {str(db_path)!r} holds no OpsGate data (run `opsgate migrate`)"
                )
            yield store
    elif not await asyncio.to_thread(db_path.is_file):
        raise StoreError(f"no database at {str(db_path)!r} (set OPSGATE_DB)")
    else:
        async with SQLiteStore(db_path) as store:
            yield store


async def run_verify(
    db_path: Path | DatabaseURL, *, head: str | None, out: TextIO, err: TextIO | None = None
) -> int:
    """Walk the chain; `ok: N rows, head H` and 0, or the first bad seq and why, and 1."""
    err = err or sys.stderr
    try:
        async with _reader(db_path) as store:
            recorded = await store.audit_head()
            rows = await store.audit_entries()
    except StoreError as exc:
        print(f"opsgate audit verify: {exc}", file=err)
        return 1
    verdict = verify_chain(
        rows, key=audit_key(), keyed=recorded.keyed, head=head, chain_seq=recorded.seq
    )
    match verdict:
        case Intact(rows=rows_checked, head=last):
            print(f"ok: {rows_checked} rows, head {last}", file=out)
            return 0
        case Broken(seq=seq, why=why):
            print(f"seq {seq}: {why}", file=out)
            return 1
        case KeyMismatch(why=why):
            print(f"key: {why}", file=out)
            return 1


async def run_follow(
    db_path: Path | DatabaseURL,
    *,
    as_json: bool,
    out: TextIO,
    err: TextIO | None = None,
    after: int | None = None,
) -> int:
    """Print each row written after the start (after seq `after` when given), as it is
    written, until interrupted. A lost database (the bot restarting, PostgreSQL failing over)
    is retried from the same cursor."""
    err = err or sys.stderr
    cursor: int | None = after
    if cursor is not None:
        print(f"opsgate audit: following from seq {cursor + 1}", file=err, flush=True)
    failures = 0
    while True:
        try:
            async with _reader(db_path) as store:
                if cursor is None:
                    cursor, _ = await store.audit_chain_head()
                    print(f"opsgate audit: following from seq {cursor + 1}", file=err, flush=True)
                failures = 0
                cursor = await _follow(store, cursor, as_json=as_json, out=out)
        except StoreError as exc:
            if cursor is None:
                print(f"opsgate audit --follow: {exc}", file=err)
                return 1
            wait = _RETRY[min(failures, len(_RETRY) - 1)]
            failures += 1
            print(f"opsgate audit --follow: {exc}; again in {wait:g}s", file=err)
            await asyncio.sleep(wait)


async def _follow(store: Store, cursor: int, *, as_json: bool, out: TextIO) -> int:
    listen = getattr(store, "audit_appended", None)
    if listen is None:
        appended, poll = asyncio.Event(), _POLL
        return await _tail(store, cursor, appended, poll, as_json=as_json, out=out)
    async with listen() as appended:
        return await _tail(store, cursor, appended, _POSTGRES_POLL, as_json=as_json, out=out)


async def _tail(
    store: Store, cursor: int, appended: asyncio.Event, poll: float, *, as_json: bool, out: TextIO
) -> int:
    while True:
        appended.clear()
        for row in await store.audit_entries(after_seq=cursor, limit=500):
            print(_as_json(row) if as_json else _line(row), file=out, flush=True)
            cursor = row.seq if row.seq is not None else cursor
        with suppress(TimeoutError):
            await asyncio.wait_for(appended.wait(), poll)


def _line(row: AuditEntry) -> str:
    """One row of `--follow` without `--json`: the table's cells, on one line."""
    if isinstance(row, Unreadable):
        return printable(unreadable_line(row))
    return printable(
        f"{row.seq}  {row.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}  {row.event}  "
        f"{row.actor or '-'}  {row.call_id or '-'}  {details_json(row.details)}"
    )


async def run_audit(
    db_path: Path | DatabaseURL,
    *,
    since: datetime | None,
    as_json: bool,
    out: TextIO,
    err: TextIO | None = None,
) -> int:
    """Print the audit log of `db_path` (a file or a PostgreSQL URL); returns the exit status.
    Never creates a database or changes its schema."""
    err = err or sys.stderr
    try:
        if isinstance(db_path, DatabaseURL):
            rows, where = await _postgres_rows(db_path, since, as_json)
        elif not await asyncio.to_thread(db_path.is_file):
            print(f"opsgate audit: no database at {str(db_path)!r} (set OPSGATE_DB)", file=err)
            return 1
        else:
            async with SQLiteStore(db_path) as store:
                rows = await store.audit_entries(since=since)
                where = {} if as_json else await _threads(store, rows)
    except StoreError as exc:
        print(f"opsgate audit: {exc}", file=err)
        return 1
    if as_json:
        for row in rows:
            print(_as_json(row), file=out)
    elif rows:
        for line in audit_table(rows, where, width=_width(out)):
            print(line, file=out)
    else:
        when = f" since {since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if since else ""
        print(f"no audit rows{when}", file=out)
    return 0


async def _postgres_rows(
    url: DatabaseURL, since: datetime | None, as_json: bool
) -> tuple[list[AuditEntry], dict[str, str]]:
    async with open_store(url, migrate=False) as store:
        if await store.schema_version() == 0:  # type: ignore[attr-defined]
            raise StoreError(f"database {str(url)!r} holds no OpsGate data (run `opsgate migrate`)")
        rows = await store.audit_entries(since=since)
        return rows, {} if as_json else await _threads(store, rows)


def audit_command(
    *,
    since: str | None,
    as_json: bool,
    action: str | None = None,
    head: str | None = None,
    follow: bool = False,
    after: int | None = None,
) -> int:
    """The command line's entry: read `--since` and the database's path, then `run_audit`
    (or `run_verify`, `run_follow`)."""
    if action == "verify":
        db = load_settings(mode="audit").opsgate_db
        return asyncio.run(run_verify(db, head=head, out=sys.stdout))
    if after is not None and (not follow or after < 0):
        print(
            "opsgate audit: --after takes a seq (0 or more) and goes with --follow", file=sys.stderr
        )
        return 2
    if follow:
        db = load_settings(mode="audit").opsgate_db
        return asyncio.run(run_follow(db, as_json=as_json, out=sys.stdout, after=after))
    try:
        since_at = parse_since(since) if since else None
    except ValueError as exc:
        print(f"opsgate audit: {exc}", file=sys.stderr)
        return 2
    db = load_settings(mode="audit").opsgate_db
    return asyncio.run(run_audit(db, since=since_at, as_json=as_json, out=sys.stdout))
