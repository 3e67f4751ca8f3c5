"""Pacing Slack Web API calls: token buckets at Slack's tiers, and waiting out a 429 (the
outbox rows' turns at the workspace-wide buckets are `bot.slack.turns`).

Slack limits each method per app per workspace by tier, and `chat.postMessage` to about one
message per second per channel with short bursts; a call over the limit is answered HTTP 429
with `Retry-After` and is not applied. slack_sdk's retry handler waits `Retry-After` a few times
and then the call is dropped: in a storm that loses answers and leaves buttons on decided cards.
Here a call first takes a token from its bucket (so a storm is spread out instead of refused),
and a 429 makes the bucket wait `Retry-After` and the call is tried again, until
`deadline` seconds have passed (minutes): a write waits until it is applied. Real errors
(`channel_not_found`, `invalid_blocks`, `not_in_channel`) are raised at once, as before.

Buckets are per method (one bot token is one workspace), and per channel for
`chat.postMessage`. One process keeps them in memory. Replicas share them through their
database (`shared`, `SlackBudgets`): each call takes its token there, in one statement,
so replicas together never spend more than Slack gives and one replica may spend all of it
while the others are idle; a 429 one of them hears holds the bucket for all. The buckets in
memory then mirror the shared ones (what `short`, `busy`, `due_in` and `claim` answer from,
without a round trip), as of this process's last take or, once that is `FRESH_SECONDS` old, a
read in the background. `share` scales every budget (an app sharing the token with another).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from ..store import BudgetShape, BudgetState

__all__ = [
    "METHOD_TIERS",
    "POST_MESSAGE_PER_CHANNEL",
    "Pacer",
    "RateLimited",
    "SharedBudgets",
    "Tier",
    "bucket_short",
    "pacer_of",
    "retry_after",
]

logger = logging.getLogger("opsgate.slack.pacing")


@dataclass(frozen=True, slots=True)
class Tier:
    """A bucket's shape: `burst` calls at once, `per_minute` on average."""

    per_minute: float
    burst: int


TIER_2 = Tier(20, 5)
TIER_3 = Tier(50, 10)
TIER_4 = Tier(100, 20)
POST_MESSAGE_PER_CHANNEL = Tier(60, 3)
"""`chat.postMessage`: about one message per second per channel, bursts of 3."""

METHOD_TIERS: Mapping[str, Tier] = MappingProxyType(
    {
        "chat.startStream": TIER_2,
        "chat.stopStream": TIER_2,
        "usergroups.users.list": TIER_2,
        "chat.update": TIER_3,
        "chat.delete": TIER_3,
        "reactions.add": TIER_3,
        "reactions.remove": TIER_3,
        "conversations.info": TIER_3,
        "conversations.history": TIER_3,
        "conversations.replies": TIER_3,
        "users.conversations": TIER_3,
        "conversations.members": TIER_4,
        "chat.appendStream": TIER_4,
        "chat.postEphemeral": TIER_4,
        "chat.getPermalink": TIER_4,
        "views.open": TIER_4,
        "views.update": TIER_4,
        "views.publish": TIER_4,
        "users.info": TIER_4,
        "files.getUploadURLExternal": TIER_4,
        "files.completeUploadExternal": TIER_4,
    }
)
"""Slack's published tier of each method the bot calls (docs.slack.dev, "Rate limits")."""


class RateLimited(SlackApiError):
    """Slack kept answering 429 for `method` past the pacer's deadline (the thread is told)."""

    def __init__(self, method: str, response: AsyncSlackResponse) -> None:
        super().__init__(  # type: ignore[no-untyped-call]
            f"{method!r} was rate limited past the deadline", response
        )
        self.method = method


def retry_after(exc: SlackApiError) -> float | None:
    """The seconds a 429 asks to wait, or None when `exc` is not a rate limit."""
    response = exc.response
    if getattr(response, "status_code", None) != 429 and response.get("error") != "ratelimited":
        return None
    headers: Mapping[str, Any] = getattr(response, "headers", None) or {}
    for key, value in headers.items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                break
    return 1.0


MARGIN = 0.95
"""The share of a tier's rate the buckets spend: Slack's accounting is not ours to read, and
spending all of it would be refused now and then. (0.9 cost the storms about 10% of their
drain; at 0.95 the stand-in refused none in `bench/storms.py`.)"""

START_SKEW = 0.25
"""Seconds a new bucket's burst is held back by: Slack's bucket starts when our first call
arrives, later than ours, so a call taken exactly one refill after the burst could reach it a
moment early. The last call of the first burst waits this long (0.24 of a post's token), and
every later one as much; a whole call kept back cost each channel's first burst a second (the
third of 6 long answers' posts waited 0.9 s, the tenth of a restart's posts a second). The
replicas' shared buckets keep as much back for the database round trip between a token taken
and its call leaving (`_Bucket.shape`)."""


class SharedBudgets(Protocol):
    """The store's shared buckets (`SlackBudgets`); times are the pacer's seconds."""

    async def take_budget(self, bucket: str, shape: BudgetShape, now: float) -> BudgetState: ...

    async def take_budget_within(
        self, bucket: str, shape: BudgetShape, now: float, within: float
    ) -> BudgetState | None: ...

    async def pause_budget(
        self, bucket: str, shape: BudgetShape, now: float, until: float
    ) -> BudgetState: ...

    async def read_budget(self, bucket: str, shape: BudgetShape) -> BudgetState | None: ...


SHARED_SECONDS = 2.0
"""Longest a take from the shared buckets may wait for the database; then this process paces
alone from its own mirror (Slack's 429s, if any, are still obeyed)."""

PAID_SECONDS = 2.0
"""Longest a token taken ahead from the shared bucket (`Pacer.claim_in_time`) waits for this
process's call of its method: past that it is dropped (the call went another way: an outbox row
another replica sent, a 👀 cancelled by its removal), so no call spends a token counted seconds
before it leaves."""

FRESH_SECONDS = 0.2
"""How old (clock seconds) the mirror of a shared bucket may be when the pacer is asked about
it (`claim`, `short`, `busy`, `due_in`) before it reads the bucket again, in the background: the
answer now is the mirror's, the next one the database's."""


class _Bucket:
    """Reservations against a refilling budget: a taker that finds it short waits its turn
    (first come, first served), so concurrent callers are spread, never refused here."""

    def __init__(self, tier: Tier, share: float, now: float) -> None:
        self.rate = tier.per_minute * share * MARGIN / 60.0
        self.burst = max(1.0, tier.burst * share)
        self.skew = min(1.0, START_SKEW * self.rate) if self.burst > 1 else 0.0
        """The part of the burst held back (`START_SKEW`)."""
        self.tokens = self.burst - self.skew
        self.at = now
        self.paused_until = 0.0
        self.claimed: list[float] = []
        """When each token taken ahead by `claim` may be spent (the next calls spend them)."""
        self.paid: list[float] = []
        """When each token taken ahead from the shared bucket (`Pacer.claim_in_time`) may be
        spent: the next calls spend them without taking another."""
        self.mirrored: float | None = -math.inf
        """When (the pacer's clock) this bucket last mirrored the shared one; None: reading."""

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def reserve(self, now: float) -> float:
        """Take a token (one `claim` took ahead, if any); the seconds to wait before using it."""
        if self.claimed:
            return max(self.claimed.pop(0) - now, self.paused_until - now, 0.0)
        self._refill(now)
        self.tokens -= 1.0
        wait = 0.0 if self.tokens >= 0 else -self.tokens / self.rate
        return max(wait, self.paused_until - now)

    def due_in(self, now: float) -> float:
        """Seconds until a token could be spent (nothing is taken)."""
        self._refill(now)
        wait = 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate
        return max(wait, self.paused_until - now)

    def claim(self, now: float, within: float) -> bool:
        """Take a token for a call to come, if it can be spent within `within` seconds."""
        wait = self.due_in(now)
        if wait > within:
            return False
        self.tokens -= 1.0
        self.claimed.append(now + wait)
        return True

    def short(self, now: float) -> bool:
        """Nothing left to spend right now (streaming sends bigger pieces then)."""
        return self.tokens + (now - self.at) * self.rate < 1.0 or self.paused_until > now

    def busy(self, now: float, beyond: int = 0) -> bool:
        """Part of the burst is spent: calls went out in the last few seconds (`beyond` more than
        one). A bucket that mirrors a shared one is full `START_SKEW` short (`shape`)."""
        shared = self.mirrored is None or self.mirrored > -math.inf
        full = self.shape().burst if shared else self.burst
        left = self.tokens + (now - self.at) * self.rate
        return left < full - 1.0 - beyond or self.short(now)

    def shape(self) -> BudgetShape:
        """The shared bucket's shape: `START_SKEW` of the burst always kept back (a token is
        taken a database round trip before the call leaves, and those trips vary: calls may
        reach Slack closer together than they were taken, by as much as Slack's bucket
        starting after ours)."""
        burst = self.burst - self.skew
        return BudgetShape(self.rate, burst, burst)

    def mirror(self, state: BudgetState, now: float, shared_now: float) -> None:
        """Take the shared bucket's state (at `shared_now` on the shared clock) as this one's."""
        self.tokens = state.tokens + (shared_now - state.at) * self.rate
        self.at = now
        self.paused_until = state.paused_until - shared_now + now
        self.claimed.clear()  # the shared take decided: tokens claimed ahead were guesses
        self.mirrored = now

    def pause(self, now: float, seconds: float) -> None:
        """Slack said wait: no call before `seconds`, and the budget starts empty after."""
        self._refill(now)
        self.paused_until = max(self.paused_until, now + seconds)
        self.tokens = min(self.tokens, 0.0)


class Pacer:
    """The buckets of one bot token, and the waiting; `observer(method)` hears of each 429."""

    def __init__(
        self,
        *,
        tiers: Mapping[str, Tier] = METHOD_TIERS,
        post_message: Tier = POST_MESSAGE_PER_CHANNEL,
        share: float = 1.0,
        speed: float = 1.0,
        deadline: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        on_ratelimited: Callable[[str], None] | None = None,
        shared: SharedBudgets | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.tiers = tiers
        self.post_message = post_message
        self.share = share
        self.speed = speed
        """Bucket seconds per clock second (tests run Slack's pace faster, like the stand-in)."""
        self.deadline = deadline
        """Seconds a write keeps waiting out 429s before `RateLimited` is raised."""
        self.clock = clock
        self.on_ratelimited = on_ratelimited or (lambda method: None)
        self.limited: dict[str, int] = {}
        """429s seen, per method."""
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self.shared = shared
        """The replicas' buckets in their database (None: this process paces alone)."""
        self.wall = wall
        """The clock every replica shares (the shared buckets' times), in seconds."""
        self._reads: set[asyncio.Task[None]] = set()
        """Reads of shared buckets in flight (`_mirror`)."""

    def _bucket(self, method: str, channel: str | None) -> _Bucket | None:
        if method == "chat.postMessage":
            tier, key = self.post_message, (method, channel or "")
        elif method in self.tiers:
            tier, key = self.tiers[method], (method, "")
        else:
            return None
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tier, self.share, self._now())
        return bucket

    def _now(self) -> float:
        return self.clock() * self.speed

    def _mirror(self, method: str, channel: str | None) -> _Bucket | None:
        """`method`'s bucket, read again from the shared one in the background when its
        mirror is older than `FRESH_SECONDS` (so other replicas' spending shows)."""
        bucket = self._bucket(method, channel)
        if bucket is None or not self._stale(bucket):
            return bucket
        bucket.mirrored = None
        task = asyncio.get_running_loop().create_task(self._read(bucket, method, channel))
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)
        return bucket

    async def fresh(self, method: str, channel: str | None = None) -> None:
        """Read the replicas' bucket now when this process's mirror of it is older than
        `FRESH_SECONDS`, before a judgement that matters (`short`, `busy`): a bucket this
        process never spent from is a full burst in its memory until read."""
        bucket = self._bucket(method, channel)
        if bucket is not None and self._stale(bucket):
            bucket.mirrored = None
            await self._read(bucket, method, channel)

    def _stale(self, bucket: _Bucket) -> bool:
        """A mirror of a shared bucket older than `FRESH_SECONDS`, not being read already."""
        if self.shared is None or bucket.mirrored is None:
            return False
        return self._now() - bucket.mirrored >= FRESH_SECONDS * self.speed

    async def _read(self, bucket: _Bucket, method: str, channel: str | None) -> None:
        assert self.shared is not None
        shared_now = self.wall() * self.speed
        try:
            async with asyncio.timeout(SHARED_SECONDS):
                state = await self.shared.read_budget(_shared_key(method, channel), bucket.shape())
        except Exception:
            logger.exception("could not read the shared Slack budget of %s", method)
            state = None
        if state is None:
            bucket.mirrored = self._now()
        else:
            bucket.mirror(state, self._now(), shared_now)

    async def take(self, method: str, channel: str | None = None) -> None:
        """Wait for `method`'s (and the channel's) turn."""
        bucket = self._bucket(method, channel)
        if bucket is None:
            return
        now = self._now()
        while bucket.paid and bucket.paid[0] < now - PAID_SECONDS * self.speed:
            bucket.paid.pop(0)
        if bucket.paid:
            wait = max(bucket.paid.pop(0) - now, bucket.paused_until - now, 0.0)
        elif self.shared is None:
            wait = bucket.reserve(self._now())
        else:
            wait = await self._take_shared(bucket, method, channel)
        if wait > 0:
            await asyncio.sleep(wait / self.speed)

    async def _take_shared(self, bucket: _Bucket, method: str, channel: str | None) -> float:
        """A token of the replicas' bucket: the seconds (the bucket's) to wait before using it.
        The database not answering in time: this process's own bucket decides."""
        assert self.shared is not None
        shared_now = self.wall() * self.speed
        try:
            async with asyncio.timeout(SHARED_SECONDS):
                state = await self.shared.take_budget(
                    _shared_key(method, channel), bucket.shape(), shared_now
                )
        except Exception:
            logger.exception("could not take %s from the shared Slack budget", method)
            return bucket.reserve(self._now())
        bucket.mirror(state, self._now(), shared_now)
        return state.wait(shared_now)

    async def _pause_shared(self, method: str, channel: str | None, seconds: float) -> None:
        """Slack's 429 holds the replicas' bucket too (`seconds`: the bucket's)."""
        bucket = self._bucket(method, channel)
        if self.shared is None or bucket is None:
            return
        shared_now = self.wall() * self.speed
        try:
            async with asyncio.timeout(SHARED_SECONDS):
                state = await self.shared.pause_budget(
                    _shared_key(method, channel), bucket.shape(), shared_now, shared_now + seconds
                )
        except Exception:
            logger.exception("could not pause the shared Slack budget of %s", method)
            return
        bucket.mirror(state, self._now(), shared_now)

    def short(self, method: str, channel: str | None = None) -> bool:
        bucket = self._mirror(method, channel)
        return bucket is not None and bucket.short(self._now())

    def claim(self, method: str, within: float, channel: str | None = None) -> bool:
        """Take `method`'s next token now if it can be spent within `within` of Slack's seconds
        (the next call of `method` spends it); False, taking nothing, when the bucket is too
        short.
        How a caller picks the call whose budget can take it now (a 👀 only while a
        `reactions.add` is free within a second; `claim_in_time` for a stream slot)."""
        bucket = self._mirror(method, channel)
        return bucket is None or bucket.claim(self._now(), within)

    def due_in(self, method: str, channel: str | None = None) -> float:
        """Clock seconds until `method` (in `channel`) could be called without waiting."""
        bucket = self._mirror(method, channel)
        return 0.0 if bucket is None else bucket.due_in(self._now()) / self.speed

    async def claim_in_time(self, method: str, within: float, channel: str | None = None) -> bool:
        """`claim`, judged and taken in the replicas' shared bucket where there is one: a mirror
        up to `FRESH_SECONDS` old lets every replica take the one slot left (`bot.slack.streaming`
        streams only while a `chat.startStream` slot is free within a second, else posts). The
        database not answering in time: this process's own mirror decides.

        A mirror that says no already is believed (other replicas only ever spend more), and
        a refusal reads the bucket into it: in a storm every run asks for its 👀, and all of
        them taking the one bucket's row lock in turn would hold each run up behind the
        others."""
        bucket = self._bucket(method, channel)
        if self.shared is None or bucket is None:
            return self.claim(method, within, channel)
        if bucket.due_in(self._now()) > within:
            return False
        shared_now = self.wall() * self.speed
        try:
            async with asyncio.timeout(SHARED_SECONDS):
                state = await self.shared.take_budget_within(
                    _shared_key(method, channel), bucket.shape(), shared_now, within
                )
        except Exception:
            logger.exception("could not take %s from the shared Slack budget", method)
            return self.claim(method, within, channel)
        if state is None:
            await self._read(bucket, method, channel)
            return False
        bucket.mirror(state, self._now(), shared_now)
        bucket.paid.append(self._now() + state.wait(shared_now))
        return True

    def busy(self, method: str, channel: str | None = None, *, beyond: int = 0) -> bool:
        """`method`'s bucket (the channel's) is not full: it is being spent (a storm); `beyond`:
        by that many calls more than one."""
        bucket = self._mirror(method, channel)
        return bucket is not None and bucket.busy(self._now(), beyond)

    def limited_by_slack(self, method: str, channel: str | None, seconds: float) -> None:
        """Slack answered 429: count it and hold the bucket for `seconds` (clock seconds)."""
        self.limited[method] = self.limited.get(method, 0) + 1
        self.on_ratelimited(method)
        bucket = self._bucket(method, channel)
        if bucket is not None:
            bucket.pause(self._now(), seconds * self.speed)
        logger.info("%s rate limited; waiting %.1f s", method, seconds)

    async def call(
        self,
        method: str,
        channel: str | None,
        send: Callable[[], Any],
    ) -> AsyncSlackResponse:
        """`send()` (one Web API call) in its turn, again after each 429, until it is applied
        or `deadline` passes (then `RateLimited`). Other errors propagate at once."""
        started = self.clock()
        while True:
            await self.take(method, channel)
            try:
                response: AsyncSlackResponse = await send()
                return response
            except SlackApiError as exc:
                wait = retry_after(exc)
                if wait is None:
                    raise
                self.limited_by_slack(method, channel, wait)
                await self._pause_shared(method, channel, wait * self.speed)
                if self.clock() - started + wait > self.deadline:
                    raise RateLimited(method, exc.response) from exc
                if self._bucket(method, channel) is None:
                    await asyncio.sleep(wait)


def _shared_key(method: str, channel: str | None) -> str:
    """A shared bucket's name: the method, and the channel for `chat.postMessage`."""
    return f"{method}:{channel or ''}" if method == "chat.postMessage" else method


def pacer_of(client: object) -> Pacer | None:
    """The pacer of a paced Web API client (`bot.slack.app.CountingWebClient`), else None."""
    pacer = getattr(client, "pacer", None)
    return pacer if isinstance(pacer, Pacer) else None


def bucket_short(client: object) -> Callable[[str], bool] | None:
    """The paced client's "bucket is short" test (`Pacer.short`), None when it is not paced."""
    pacer = pacer_of(client)
    return pacer.short if pacer is not None else None
