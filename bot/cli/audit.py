"""`opsgate audit [--since WHEN] [--json]`: print the audit log, as a table or as JSON lines.

Audit rows hold untrusted text (tool arguments, rejection reasons), so the table escapes anything
a terminal could interpret; JSON lines are pure ASCII for the same reason.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from ..settings import load_settings
from ..store import AuditRow, SQLiteStore, StoreError

__all__ = ["audit_command", "parse_since", "run_audit"]

_RELATIVE = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_COLUMNS = ("time (UTC)", "event", "actor", "session", "call", "details")


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


def _printable(text: str) -> str:
    """Escape control characters (ANSI sequences included) so a row cannot drive the terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _as_json(row: AuditRow) -> str:
    data: dict[str, Any] = row.model_dump(mode="json")
    return json.dumps(data, ensure_ascii=True, sort_keys=True)


def _cells(row: AuditRow) -> tuple[str, ...]:
    details = json.dumps(row.details, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return tuple(
        _printable(cell)
        for cell in (
            f"{row.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}",
            row.event,
            row.actor or "-",
            row.session_id or "-",
            row.call_id or "-",
            details,
        )
    )


def _table(rows: list[AuditRow]) -> list[str]:
    cells = [_COLUMNS, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]]).rstrip()
        for line in cells
    ]


async def run_audit(
    db_path: Path,
    *,
    since: datetime | None,
    as_json: bool,
    out: TextIO,
    err: TextIO | None = None,
) -> int:
    """Print the audit log of `db_path`; returns the exit status. Never creates a database."""
    err = err or sys.stderr
    if not await asyncio.to_thread(db_path.is_file):
        print(f"opsgate audit: no database at {str(db_path)!r} (set OPSGATE_DB)", file=err)
        return 1
    try:
        async with SQLiteStore(db_path) as store:
            rows = await store.audit_rows(since=since)
    except StoreError as exc:
        print(f"opsgate audit: {exc}", file=err)
        return 1
    if as_json:
        for row in rows:
            print(_as_json(row), file=out)
    elif rows:
        for line in _table(rows):
            print(line, file=out)
    else:
        when = f" since {since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if since else ""
        print(f"no audit rows{when}", file=out)
    return 0


def audit_command(*, since: str | None, as_json: bool) -> int:
    """The command line's entry: read `--since` and the database's path, then `run_audit`."""
    try:
        since_at = parse_since(since) if since else None
    except ValueError as exc:
        print(f"opsgate audit: {exc}", file=sys.stderr)
        return 2
    db = load_settings(mode="audit").opsgate_db
    return asyncio.run(run_audit(db, since=since_at, as_json=as_json, out=sys.stdout))
