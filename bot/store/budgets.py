"""Slack budgets shared by the replicas: token buckets whose tokens are taken in the database.

Slack's limits are the workspace's (one bot token), and `chat.postMessage`'s a channel's,
whichever replica calls. Each replica pacing alone at the whole budget spends it up to three
times over (Slack answers 429s); at a third each, a storm one replica runs drains at a third
of Slack's pace. Here a bucket is a row (`slack_budgets`: tokens, when they were counted, until
when Slack said wait), and a take is one statement that refills the row to `now`, takes a
token and returns what is left, so replicas together never take more than the bucket gives
and one replica may take all of it while the others are idle. Tokens below zero are
reservations: the taker waits `-tokens / rate` before its call, first come first served, as
the in-memory bucket (`bot.slack.pacing`) does. A 429 (`pause_budget`) empties the bucket and
holds it until Slack's `Retry-After` for every replica.

Times are the caller's (`now`, in the pacer's seconds on a clock every replica shares, the
wall clock); the store reads none of its own. A clock a little behind another replica's only
counts from the later of the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from .core import StoreCore
from .errors import StoreError

__all__ = ["BudgetShape", "BudgetState", "SlackBudgets"]


@dataclass(frozen=True, slots=True)
class BudgetShape:
    """A bucket's shape: `rate` tokens a second, up to `burst`; a new bucket starts at `start`
    (one call of the burst is kept back: Slack's bucket starts later than ours)."""

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
            row = await tx.fetch_one(
                "SELECT tokens, at, paused_until FROM slack_budgets WHERE bucket = :bucket",
                {"bucket": bucket},
            )
        if row is None:
            return None
        return BudgetState(
            float(row["tokens"]), float(row["at"]), float(row["paused_until"]), shape.rate
        )

    async def _budget(
        self, what: str, sql: str, bucket: str, shape: BudgetShape, now: float, until: float
    ) -> BudgetState:
        params = {
            "bucket": bucket,
            "now": float(now),
            "until": float(until),
            "rate": float(shape.rate),
            "burst": float(shape.burst),
            "start": float(shape.start),
        }
        async with self._db.transaction(what) as tx:
            row = await tx.fetch_one(sql, params)
        if row is None:  # an upsert returns its row
            raise StoreError(f"the Slack budget {bucket!r} returned no row")
        return BudgetState(
            float(row["tokens"]), float(row["at"]), float(row["paused_until"]), shape.rate
        )
