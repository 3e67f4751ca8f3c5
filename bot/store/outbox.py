"""The outbox: every write the bot owes Slack, stored before it is tried, sent by whoever is alive.

A write (a notice, a card's redraw, a reaction, a Home tab, an ephemeral reply) is a row here,
committed before it is attempted, so a restart or the death of a replica loses none: the sender
(`bot.slack.outbox`) claims rows for a lease (`claimed_until`; on PostgreSQL with
`FOR UPDATE SKIP LOCKED`, so replicas never take the same row), and deletes a row once Slack said
ok. A sender that dies leaves its rows claimed until the lease lapses; then anyone takes them.

Writes that supersede each other share a `key`: putting a row deletes the unclaimed rows with that
key (only the latest redraw of a card, the latest Home tab of a person is sent), and a row that
`cancels` (a reaction removed) deletes its unsent opposite and is itself not stored. Rows of one
key are claimed one at a time, in order. A row of a key that was claimed when a newer one came is
superseded too: a claim deletes it once its lease lapsed (its sender died), and its sender asks
`outbox_superseded` before it sends, so on no replica is it sent. A row that was tried before hands
that on to the row superseding it (`attempts`), whose drawing then looks for what the try may have
posted. A keyed entry may `settle`: it is due a few seconds after the last change of its burst (the
row superseding an unsent one keeps when the burst began, and is due no later than `SETTLE_MAX`
settles after that), so a burst of changes is one write. Plain storage: the payload is the Web API
method and its arguments, which the store does not read.

One kind of row is an intent rather than a call: `CARD_REDRAW` ("redraw the card of this call",
key `card:<ledger id>`), which the store itself writes in the transaction of every change a card
shows (a decision, an approval of N, an edit, "Allow for", an expiry, a cancel, the call's
result), always: the front end's sender draws the card from the call's state when it sends
the row (Slack's, or the terminal's in-process one). So a decision and its card's redraw commit
together; the store's `wake` (a constructor argument) tells the sender to look now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ._outbox_rows import CARD_REDRAW, REDRAW_PRIORITY, OutboxEntry, card_redraw, put_rows
from .core import StoreCore
from .db import Row, Tx, aware
from .errors import StoreError

__all__ = [
    "CARD_REDRAW",
    "REDRAW_PRIORITY",
    "BudgetShape",
    "BudgetState",
    "Outbox",
    "OutboxEntry",
    "OutboxRow",
    "OutboxStats",
    "OutboxWake",
    "SlackBudgets",
    "card_redraw",
]


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: str
    method: str
    params: dict[str, Any]
    meta: dict[str, Any]
    priority: int
    channel_id: str | None
    key: str | None
    created_at: datetime
    attempts: int


@dataclass(frozen=True, slots=True)
class OutboxStats:
    """Rows waiting per priority, and the age of the oldest (None when empty)."""

    depth: dict[int, int]
    oldest: datetime | None


class OutboxWake:
    """Rows were put in the outbox: its sender should look now, and is not idle until it has.
    Built before the store and the sender and given to both (the store calls it after a change
    that wrote a card's redraw, the sender after its own puts), so that neither has to exist
    before the other."""

    def __init__(self) -> None:
        self.rings = 0
        """How many times rows were put (the sender is idle only once it looked after the last)."""
        self.woken = asyncio.Event()
        self.idle = asyncio.Event()

    def __call__(self) -> None:
        self.rings += 1
        self.idle.clear()
        self.woken.set()


_NEWER = "(o.created_at, o.id) > (outbox.created_at, outbox.id)"
_OLDER = "(o.created_at, o.id) < (outbox.created_at, outbox.id)"
"""The order of a key's rows (`o` against `outbox`): by when each was put, or its burst began
(a settling row keeps that), then by id. Two puts in overlapping transactions (replicas owing
one person's tab at once) can carry one burst's time; the id still orders them, so one is
claimed first and superseded by the other. Settling rows are intents, drawn when sent: either
stands for both."""


class Outbox(StoreCore):
    """The outbox operations of `bot.store.Store`."""

    async def put_outbox(self, entries: Sequence[OutboxEntry]) -> list[str]:
        """Store `entries` (one transaction); the ids of the rows stored."""
        async with self._db.transaction("put outbox rows") as tx:
            return await self._put_outbox(tx, entries)

    async def _put_outbox(self, tx: Tx, entries: Sequence[OutboxEntry]) -> list[str]:
        """Inside a transaction: the step a state change and the write reporting it share."""
        return await put_rows(self._db, tx, entries, self._now())

    async def claim_outbox(self, claimer: str, *, limit: int, lease: timedelta) -> list[OutboxRow]:
        """Up to `limit` due rows nobody holds, best priority first, held by `claimer` for
        `lease`; a row whose key has an earlier row in flight waits for it."""
        now = self._moment()
        async with self._db.transaction("claim outbox rows") as tx:
            await self._drop_superseded(tx, now)
            rows = await tx.fetch_all(
                "SELECT * FROM outbox WHERE not_before <= :now"
                " AND (claimed_until IS NULL OR claimed_until < :now)"
                " AND NOT EXISTS (SELECT 1 FROM outbox AS o WHERE o.key = outbox.key"
                " AND o.id <> outbox.id AND (o.claimed_until >= :now OR " + _OLDER + "))"
                " ORDER BY priority, created_at, id LIMIT :limit" + self._db.skip_locked,
                {"now": self._db.time_in(now), "limit": limit},
            )
            if rows:
                await tx.execute_many(
                    "UPDATE outbox SET claimed_by = :claimer, claimed_until = :until,"
                    " attempts = attempts + 1 WHERE id = :id",
                    [
                        {
                            "claimer": claimer,
                            "until": self._db.time_in(now + lease),
                            "id": row["id"],
                        }
                        for row in rows
                    ],
                )
        return [self._outbox_model(row, claimed=True) for row in rows]

    async def _drop_superseded(self, tx: Tx, now: datetime) -> None:
        """Delete the rows nobody holds (their sender died) that a newer row of their key
        supersedes, handing their tries on to it."""
        stale = await tx.fetch_all(
            "SELECT id, key, attempts FROM outbox WHERE key IS NOT NULL"
            " AND claimed_until IS NOT NULL AND claimed_until < :now"
            " AND EXISTS (SELECT 1 FROM outbox AS o WHERE o.key = outbox.key AND "
            + _NEWER
            + ")"
            + self._db.skip_locked,
            {"now": self._db.time_in(now)},
        )
        for row in stale:
            await self._supersede(tx, str(row["id"]), str(row["key"]), int(row["attempts"]))

    async def _supersede(self, tx: Tx, row_id: str, key: str, attempts: int) -> None:
        await tx.execute("DELETE FROM outbox WHERE id = :id", {"id": row_id})
        if attempts > 0:  # tried: the newest row of the key counts as tried as well
            await tx.execute(
                "UPDATE outbox SET attempts = attempts + :n WHERE key = :key"
                " AND claimed_until IS NULL",
                {"key": key, "n": attempts},
            )

    async def outbox_superseded(self, row_id: str) -> bool:
        """Before a claimed keyed row is sent: if a newer row of its key was put meanwhile,
        this one is done unsent (deleted; the newer one is drawn from the state then). A 👀
        superseded by its removal (put while the mark waited in flight) takes the removal
        with it: Slack would refuse it, and spend a Tier 3 call doing so."""
        async with self._db.transaction("supersede an outbox row") as tx:
            row = await tx.fetch_one(
                "SELECT key, attempts, method FROM outbox WHERE id = :id AND EXISTS"
                " (SELECT 1 FROM outbox AS o WHERE o.key = outbox.key AND " + _NEWER + ")",
                {"id": row_id},
            )
            if row is None:
                return False
            # Claimed: its count includes this claim, which sent nothing.
            await self._supersede(tx, row_id, str(row["key"]), int(row["attempts"]) - 1)
            # A mark never tried, so never made, needs no removal.
            if row["method"] == "reactions.add" and int(row["attempts"]) == 1:
                await tx.execute(
                    "DELETE FROM outbox WHERE key = :key AND method = 'reactions.remove'"
                    " AND claimed_until IS NULL",
                    {"key": row["key"]},
                )
        return True

    async def outbox_next_due(self) -> datetime | None:
        """When the next row nobody holds falls due (None: none is still to fall due); a
        sender that found nothing to claim waits until then (a settling row) rather than
        calling itself idle. A row due already but held back (its key in flight elsewhere) is
        not waited for: the row ahead of it wakes whoever sends it."""
        async with self._db.reading("next outbox row due") as tx:
            row = await tx.fetch_one(
                "SELECT MIN(not_before) AS due FROM outbox"
                " WHERE claimed_until IS NULL AND not_before > :now",
                {"now": self._db.time_in(self._moment())},
            )
        due = None if row is None else self._db.time_out(row["due"])
        return None if due is None else aware(due)

    async def hold_outbox(self, entry: OutboxEntry, claimer: str, lease: timedelta) -> str:
        """A write its own process is making now (a streamed answer's ending): stored already
        claimed, so that only that process's death (its restart, or a lapsed lease) hands it to
        a sender; the process deletes it once the write is made, or releases it to the sender."""
        until = self._db.time_in(self._moment() + lease)
        async with self._db.transaction("hold an outbox row") as tx:
            [row_id] = await self._put_outbox(tx, [entry])
            await tx.execute(
                "UPDATE outbox SET claimed_by = :claimer, claimed_until = :until WHERE id = :id",
                {"claimer": claimer, "until": until, "id": row_id},
            )
        return row_id

    async def outbox_sent(self, row_id: str) -> None:
        """Slack applied the row's write (or refused it for good): it is done."""
        async with self._db.transaction("finish an outbox row") as tx:
            await tx.execute("DELETE FROM outbox WHERE id = :id", {"id": row_id})

    async def outbox_later(
        self, row_id: str, not_before: datetime, error: str, *, tried: bool = True
    ) -> None:
        """Not applied yet: release the row, due again at `not_before`. Not `tried` (put back
        for its bucket before any call): its claim does not count as an attempt."""
        async with self._db.transaction("release an outbox row") as tx:
            await tx.execute(
                "UPDATE outbox SET claimed_by = NULL, claimed_until = NULL,"
                " not_before = :at, last_error = :error, attempts = attempts - :untried"
                " WHERE id = :id",
                {
                    "id": row_id,
                    "at": self._db.time_in(not_before),
                    "error": error[:500],
                    "untried": 0 if tried else 1,
                },
            )

    async def renew_outbox(self, claimer: str, row_ids: Sequence[str], lease: timedelta) -> None:
        """Keep holding rows still being sent (a write waiting out 429s outlives a lease); a
        row another sender took meanwhile is left to it."""
        until = self._db.time_in(self._moment() + lease)
        async with self._db.transaction("renew outbox claims") as tx:
            await tx.execute_many(
                "UPDATE outbox SET claimed_until = :until WHERE id = :id AND claimed_by = :claimer",
                [{"until": until, "id": i, "claimer": claimer} for i in row_ids],
            )

    async def release_outbox(self, claimer: str) -> int:
        """At a sender's start: what `claimer` held before (a process killed mid-send, whose
        name its restart takes again) is due at once instead of when its lease lapses."""
        async with self._db.transaction("release outbox rows") as tx:
            return await tx.execute(
                "UPDATE outbox SET claimed_by = NULL, claimed_until = NULL"
                " WHERE claimed_by = :claimer",
                {"claimer": claimer},
            )

    async def outbox_kept(self, row_ids: Sequence[str]) -> set[str]:
        """Which of `row_ids` are still in the outbox: a sender that put rows back forgets those
        cancelled, superseded or sent elsewhere since, rather than waiting out their due time."""
        names = {f"r{n}": row_id for n, row_id in enumerate(row_ids)}
        if not names:
            return set()
        marks = ", ".join(f":{name}" for name in names)
        async with self._db.reading("outbox rows kept") as tx:
            rows = await tx.fetch_all(f"SELECT id FROM outbox WHERE id IN ({marks})", names)
        return {str(row["id"]) for row in rows}

    async def outbox_stats(self) -> OutboxStats:
        async with self._db.reading("outbox depth") as tx:
            rows = await tx.fetch_all(
                "SELECT priority, COUNT(*) AS n, MIN(created_at) AS oldest"
                " FROM outbox GROUP BY priority"
            )
        depth = {int(row["priority"]): int(row["n"]) for row in rows}
        times = [t for row in rows if (t := self._db.time_out(row["oldest"])) is not None]
        return OutboxStats(depth, min(times) if times else None)

    def _outbox_model(self, row: Row, *, claimed: bool = False) -> OutboxRow:
        created = self._db.time_out(row["created_at"])
        return OutboxRow(
            id=str(row["id"]),
            method=str(row["method"]),
            params=dict(self._db.json_out(row["params"]) or {}),
            meta=dict(self._db.json_out(row["meta"]) or {}),
            priority=int(row["priority"]),
            channel_id=row["channel_id"],
            key=row["key"],
            created_at=aware(created) if created is not None else self._moment(),
            attempts=int(row["attempts"]) + (1 if claimed else 0),
        )


# Slack budgets shared by the replicas: token buckets whose tokens are taken in the database.
#
# Slack's limits are the workspace's (one bot token), and `chat.postMessage`'s a channel's,
# whichever replica calls. Each replica pacing alone at the whole budget spends it up to three
# times over (Slack answers 429s); at a third each, a storm one replica runs drains at a third
# of Slack's pace. Here a bucket is a row (`slack_budgets`: tokens, when they were counted, until
# when Slack said wait), and a take is one statement that refills the row to `now`, takes a
# token and returns what is left, so replicas together never take more than the bucket gives
# and one replica may take all of it while the others are idle. Tokens below zero are
# reservations: the taker waits `-tokens / rate` before its call, first come first served, as
# the in-memory bucket (`bot.slack.pacing`) does. A 429 (`pause_budget`) empties the bucket and
# holds it until Slack's `Retry-After` for every replica.
#
# Times are the caller's (`now`, in the pacer's seconds on a clock every replica shares, the
# wall clock); the store reads none of its own. A clock a little behind another replica's only
# counts from the later of the two.


@dataclass(frozen=True, slots=True)
class BudgetShape:
    """A bucket's shape: `rate` tokens a second, up to `burst`; a new bucket starts at `start`
    (part of the burst is kept back: Slack's bucket starts later than ours)."""

    rate: float
    burst: float
    start: float


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A bucket after a take or a pause: `tokens` left at `at` (below zero: taken ahead by
    callers now waiting), `paused_until` (Slack's Retry-After), refilling at `rate`."""

    tokens: float
    at: float
    paused_until: float
    rate: float

    def wait(self, now: float) -> float:
        """Seconds from `now` until the last token taken may be spent."""
        owed = -self.tokens / self.rate if self.tokens < 0 else 0.0
        return max(0.0, self.at - now + owed, self.paused_until - now)

    def taken(self, now: float, burst: float) -> BudgetState:
        """The bucket after one more token is taken at `now` (as `take_budget` counts it)."""
        refilled = min(burst, self.tokens + max(0.0, now - self.at) * self.rate)
        return BudgetState(refilled - 1.0, max(self.at, now), self.paused_until, self.rate)


_READ = "SELECT tokens, at, paused_until FROM slack_budgets WHERE bucket = :bucket"
_NEW = (
    "INSERT INTO slack_budgets (bucket, tokens, at, paused_until)"
    " VALUES (:bucket, :start, :now, 0.0) ON CONFLICT (bucket) DO NOTHING"
)
_LEAST = {"sqlite": "MIN", "postgresql": "LEAST"}
_GREATEST = {"sqlite": "MAX", "postgresql": "GREATEST"}


def _sql(dialect: str, tokens: str, paused: str) -> str:
    """One statement on one bucket: `tokens` (an expression of its `refilled` count) and
    `paused` (of its `paused_until`) applied to the row refilled to `:now`, or to a new row
    at `:start`; the row as it is after."""
    least, greatest = _LEAST[dialect], _GREATEST[dialect]
    refilled = (
        f"{least}(:burst, slack_budgets.tokens + {greatest}(0.0, :now - slack_budgets.at) * :rate)"
    )
    return (
        "INSERT INTO slack_budgets (bucket, tokens, at, paused_until)"
        f" VALUES (:bucket, {tokens.format(refilled=':start')}, :now,"
        f" {paused.format(paused_until='0.0')})"
        " ON CONFLICT (bucket) DO UPDATE SET"
        f" tokens = {tokens.format(refilled=refilled)},"
        f" at = {greatest}(slack_budgets.at, :now),"
        f" paused_until = {paused.format(paused_until='slack_budgets.paused_until')}"
        " RETURNING tokens, at, paused_until"
    )


class SlackBudgets(StoreCore):
    """The shared Slack budget operations of `bot.store.Store`."""

    @property
    def budgets_shared(self) -> bool:
        """Other processes may spend the same budgets (PostgreSQL: replicas); an SQLite file
        is one bot's (held exclusively), whose pacer keeps its buckets in memory."""
        return self._db.dialect == "postgresql"

    async def take_budget(self, bucket: str, shape: BudgetShape, now: float) -> BudgetState:
        """Take one token of `bucket` at `now`: the bucket as it is after (`wait(now)`: how
        long the taker waits before its call)."""
        sql = _sql(self._db.dialect, "{refilled} - 1.0", "{paused_until}")
        return await self._budget("take a Slack budget token", sql, bucket, shape, now, 0.0)

    async def take_budget_within(
        self, bucket: str, shape: BudgetShape, now: float, within: float
    ) -> BudgetState | None:
        """Take one token of `bucket` at `now` only if it can be spent within `within`
        seconds; None, taking nothing, when the bucket is shorter. How replicas choose a call
        by its budget (a stream only while a slot is free) without each judging from its own
        mirror of the bucket and all of them taking the one slot left."""
        sql = _sql(self._db.dialect, "{refilled} - 1.0", "{paused_until}")
        params = _params(bucket, shape, now, 0.0)
        async with self._db.transaction("take a Slack budget token in time") as tx:
            # A new bucket is made first, so that the read below locks it for every taker.
            await tx.execute(_NEW, params)
            row = await tx.fetch_one(_READ + self._db.for_update, {"bucket": bucket})
            if row is None or _state(row, shape).taken(now, shape.burst).wait(now) > within:
                return None
            return _state(await _upserted(tx, sql, params, bucket), shape)

    async def pause_budget(
        self, bucket: str, shape: BudgetShape, now: float, until: float
    ) -> BudgetState:
        """Slack answered 429: no call of `bucket` before `until`, and it refills from empty."""
        least, greatest = _LEAST[self._db.dialect], _GREATEST[self._db.dialect]
        tokens = f"{least}({{refilled}}, 0.0)"
        paused = f"{greatest}({{paused_until}}, :until)"
        sql = _sql(self._db.dialect, tokens, paused)
        return await self._budget("pause a Slack budget", sql, bucket, shape, now, until)

    async def read_budget(self, bucket: str, shape: BudgetShape) -> BudgetState | None:
        """The bucket as it was last counted (None: never taken), taking nothing: how a pacer
        keeps its mirror of the replicas' spending fresh between its own takes."""
        async with self._db.reading("read a Slack budget") as tx:
            row = await tx.fetch_one(_READ, {"bucket": bucket})
        return None if row is None else _state(row, shape)

    async def _budget(
        self, what: str, sql: str, bucket: str, shape: BudgetShape, now: float, until: float
    ) -> BudgetState:
        async with self._db.transaction(what) as tx:
            row = await _upserted(tx, sql, _params(bucket, shape, now, until), bucket)
        return _state(row, shape)


def _params(bucket: str, shape: BudgetShape, now: float, until: float) -> dict[str, Any]:
    return {
        "bucket": bucket,
        "now": float(now),
        "until": float(until),
        "rate": float(shape.rate),
        "burst": float(shape.burst),
        "start": float(shape.start),
    }


async def _upserted(tx: Tx, sql: str, params: dict[str, Any], bucket: str) -> Row:
    row = await tx.fetch_one(sql, params)
    if row is None:  # an upsert returns its row
        raise StoreError(f"the Slack budget {bucket!r} returned no row")
    return row


def _state(row: Row, shape: BudgetShape) -> BudgetState:
    return BudgetState(
        float(row["tokens"]), float(row["at"]), float(row["paused_until"]), shape.rate
    )
