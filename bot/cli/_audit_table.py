"""The audit log as a table that fits the terminal (100 columns and up): long cells wrap inside
their column, each row names its channel and thread, and details are JSON, with values that were
stored as JSON text (a call's arguments) shown as the JSON they hold."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any

from ..store import AuditRow
from ..store.chain import AuditEntry, Unreadable

__all__ = ["COLUMNS", "audit_table", "details_json", "printable", "unreadable_line"]

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
