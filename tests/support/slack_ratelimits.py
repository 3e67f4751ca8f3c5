"""Slack's published Web API rate limits, for the stand-in (`SlackAPIStandIn(rate_limits=...)`).

Slack limits each method per app per workspace (one bot token here) by tier, and
`chat.postMessage` about one message per second per channel with short bursts; a call over the
limit answers HTTP 429 `{"ok": false, "error": "ratelimited"}` with `Retry-After` (whole
seconds) and is not applied. Each limit here is a token bucket: `burst` calls at once, refilled
at `per_minute`. Tiers from https://docs.slack.dev/apis/web-api/rate-limits and each method's
reference page ("Rate limits" under Facts); bursts are the ones the storms measure against.

The clock is a hook: `ManualClock` lets a test move time on instead of waiting for it, and
`speed` runs the buckets faster than the clock (a storm at a reduced scale of time; `Retry-After`
stays in clock seconds).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "METHOD_LIMITS",
    "POST_MESSAGE_PER_CHANNEL",
    "TIER_1",
    "TIER_2",
    "TIER_3",
    "TIER_4",
    "Limit",
    "ManualClock",
    "RateLimits",
]


@dataclass(frozen=True)
class Limit:
    """A token bucket's shape: `burst` calls at once, `per_minute` on average."""

    per_minute: float
    burst: int

    @property
    def seconds_per_call(self) -> float:
        return 60.0 / self.per_minute


TIER_1 = Limit(per_minute=1, burst=1)
TIER_2 = Limit(per_minute=20, burst=5)
TIER_3 = Limit(per_minute=50, burst=10)
TIER_4 = Limit(per_minute=100, burst=20)
POST_MESSAGE_PER_CHANNEL = Limit(per_minute=60, burst=3)
"""chat.postMessage's special tier: about one message per second per channel, bursts of 3."""

METHOD_LIMITS: Mapping[str, Limit] = MappingProxyType(
    {
        "apps.connections.open": TIER_1,
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
        "conversations.members": TIER_4,
        "users.conversations": TIER_3,
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
"""Each method's tier; `chat.postMessage` is limited per channel instead (and `auth.test`, a
special tier with a high limit, not at all)."""


class ManualClock:
    """Seconds that pass only when the test says so (`advance`)."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class _Bucket:
    limit: Limit
    tokens: float
    at: float

    def take(self, now: float) -> float | None:
        """Take a token; or, without one, the seconds until there is one."""
        self.tokens = min(
            float(self.limit.burst), self.tokens + (now - self.at) / self.limit.seconds_per_call
        )
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) * self.limit.seconds_per_call


@dataclass
class RateLimits:
    """The buckets of every app (token) and method, and what they refused."""

    clock: Callable[[], float] = time.monotonic
    limits: Mapping[str, Limit] = field(default_factory=lambda: METHOD_LIMITS)
    post_message: Limit = POST_MESSAGE_PER_CHANNEL
    speed: float = 1.0
    """How many bucket seconds pass per clock second (1: Slack's own pace)."""
    refused: Counter[str] = field(default_factory=Counter)
    """HTTP 429s answered, per method."""
    admitted: Counter[str] = field(default_factory=Counter)
    """Calls let through to be applied, per method (limited methods only)."""
    _buckets: dict[tuple[str, ...], _Bucket] = field(default_factory=dict)

    def retry_after(self, method: str, params: Mapping[str, Any], token: str) -> int | None:
        """None when the call may be applied (its token is taken); else the `Retry-After` to
        answer with, in whole seconds (at least 1), and the refusal is counted."""
        if method == "chat.postMessage":
            limit, key = self.post_message, (token, method, str(params.get("channel", "")))
        elif method in self.limits:
            limit, key = self.limits[method], (token, method)
        else:
            return None
        now = self.clock() * self.speed
        bucket = self._buckets.setdefault(key, _Bucket(limit, float(limit.burst), now))
        wait = bucket.take(now)
        if wait is None:
            self.admitted[method] += 1
            return None
        self.refused[method] += 1
        return max(1, math.ceil(wait / self.speed - 1e-9))

    def posts_spent(self, channel: str) -> float:
        """Of `channel`'s `chat.postMessage` burst, how much is spent now, by every token."""
        now = self.clock() * self.speed
        limit, spent = self.post_message, 0.0
        for key, bucket in self._buckets.items():
            if key[1:] == ("chat.postMessage", channel):
                left = bucket.tokens + (now - bucket.at) / limit.seconds_per_call
                spent += max(0.0, limit.burst - left)
        return spent
