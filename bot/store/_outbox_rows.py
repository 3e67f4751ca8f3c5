"""Putting outbox rows inside a transaction, and the row a card's redraw is owed as.

Shared by `outbox.py` (the outbox's own operations) and `core.py` (the step a state change of a
call takes in its own transaction: the redraw it owes its card commits with it, or neither does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .db import Db, Tx
from .rules import new_id

__all__ = [
    "CARD_REDRAW",
    "REDRAW_PRIORITY",
    "OutboxEntry",
    "card_redraw",
    "put_many",
    "put_rows",
]

CARD_REDRAW = "opsgate.card"
"""The method of an intent row: "redraw the card of `params["ledger_id"]`". Not a Web API
call: the sender draws the card from the call's state when it sends it (`bot.slack.outbox`),
so what is sent is always the latest state, however late."""
REDRAW_PRIORITY = 0
"""Cards' redraws go first: a decided card must lose its buttons before anything else."""
SETTLE_MAX = 3
"""A burst that goes on is written after at most this many settles all the same."""


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A write to put in the outbox. `priority`: lower is sent first."""

    method: str
    params: Mapping[str, Any]
    priority: int
    channel_id: str | None = None
    key: str | None = None
    """Rows with the same key supersede each other (the newest is sent)."""
    cancels: bool = False
    """With an unsent row of the same key, both vanish (a reaction added, then removed)."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """What the sender needs besides the call (a fallback for refused blocks, who to tell)."""
    settle: float = 0.0
    """Seconds a keyed row waits for the next change before it is due, so that the changes of
    a burst reach Slack as one write of the latest state (a queued notice's edits, a Home tab):
    each change of the burst puts the due time `settle` after it, up to `SETTLE_MAX` settles
    after the burst's first change. A key is written at most once per `settle`, however often
    it changes. 0: due at once."""


def card_redraw(ledger_id: str, channel_id: str | None) -> OutboxEntry:
    """The intent to redraw call `ledger_id`'s card: one key per card, so an unsent redraw is
    superseded by a newer one and two are never in flight at once."""
    return OutboxEntry(
        CARD_REDRAW,
        {"ledger_id": ledger_id},
        REDRAW_PRIORITY,
        channel_id=channel_id,
        key=f"card:{ledger_id}",
    )


_INSERT = (
    "INSERT INTO outbox (id, priority, method, channel_id, key, params, meta, created_at,"
    " not_before, attempts)"
    " VALUES (:id, :priority, :method, :channel, :key, :params, :meta, :created, :due, 0)"
)


def _row(db: Db, entry: OutboxEntry, created: Any, due: Any) -> dict[str, Any]:
    """`_INSERT`'s parameters for `entry`, a new row."""
    return {
        "id": new_id(),
        "priority": entry.priority,
        "method": entry.method,
        "channel": entry.channel_id,
        "key": entry.key,
        "params": db.json_in(dict(entry.params)),
        "meta": db.json_in(dict(entry.meta)),
        "created": created,
        "due": due,
    }


async def put_rows(db: Db, tx: Tx, entries: Sequence[OutboxEntry], now: Any) -> list[str]:
    """Store `entries` in the caller's transaction; the ids of the rows stored. An unsent row
    of an entry's key is superseded: deleted here, so no sender on any replica sends it."""
    ids: list[str] = []
    for entry in entries:
        created, due = now, now
        if entry.key is not None:
            created, due = await _burst(db, tx, entry, now)
            dropped = await tx.execute(
                "DELETE FROM outbox WHERE key = :key AND claimed_until IS NULL",
                {"key": entry.key},
            )
            if entry.cancels and dropped:
                continue
        row = _row(db, entry, created, due)
        await tx.execute(_INSERT, row)
        ids.append(str(row["id"]))
    return ids


async def _burst(db: Db, tx: Tx, entry: OutboxEntry, now: Any) -> tuple[Any, Any]:
    """When a keyed entry's burst began and when its row is due: now and now, without
    `settle`; else `settle` after this change, but no later than `SETTLE_MAX` settles after
    the burst's first (whose time the row keeps, as the unsent row it supersedes did)."""
    moment = db.time_out(now)
    if entry.settle <= 0 or moment is None:
        return now, now
    row = await tx.fetch_one(
        "SELECT MIN(created_at) AS first FROM outbox WHERE key = :key AND claimed_until IS NULL",
        {"key": entry.key},
    )
    first = db.time_out(row["first"]) if row is not None else None
    settle = timedelta(seconds=entry.settle)
    if first is None:
        return now, db.time_in(moment + settle)
    return db.time_in(first), db.time_in(min(moment + settle, first + SETTLE_MAX * settle))


async def put_many(db: Db, tx: Tx, entries: Sequence[OutboxEntry], now: Any) -> None:
    """`put_rows` in two statements, for hundreds of entries at once (the ladder's tick): the
    unsent rows their keys supersede deleted together, then every row inserted together; of
    entries sharing a key only the last is stored, as `put_rows` would leave it. A cancelling
    entry needs each delete's answer and a settling one its burst's start, so a batch holding
    either goes row by row."""
    if any(entry.cancels or entry.settle > 0 for entry in entries):
        await put_rows(db, tx, entries, now)
        return
    last = {entry.key: n for n, entry in enumerate(entries) if entry.key is not None}
    kept = [e for n, e in enumerate(entries) if e.key is None or last[e.key] == n]
    if last:
        await tx.execute_many(
            "DELETE FROM outbox WHERE key = :key AND claimed_until IS NULL",
            [{"key": key} for key in last],
        )
    rows = [_row(db, entry, now, now) for entry in kept]
    if rows:
        await tx.execute_many(_INSERT, rows)
