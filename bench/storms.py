"""Storms against the Slack stand-in that enforces Slack's tiers: `python bench/storms.py`.

Each storm is run through the real app (`running_bot`: Bolt, the listeners, the run service,
the outbox and its paced sender, the SQLite file) against `SlackAPIStandIn(rate_limits=...)`
(bursts of 5, 10 and 20 for Tiers 2, 3 and 4, 3 per channel for `chat.postMessage`). The drain
time runs from the first event sent until every run has finished and the outbox is empty. The
floor is what Slack's limits impose on the calls the storm needed: for each bucket (method, and
channel for `chat.postMessage`), `(calls - burst) / rate`, the longest of them (printed with
the bucket it is). Each storm (`tests.support.storms`, which `make test` runs small) is then
checked: every answer whole once, every command output shown, no card with buttons after its
decision, no stream left open, no 👀 left, nothing dropped, no 429 told, every ack within 3 s.
`SPEED` runs the buckets faster than the clock on both sides (the stand-in and the bot's
pacer), so a storm of Slack minutes takes seconds; the ratio does not depend on it. The bar
is 1.2x.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from _common import Checks, Table, machine, ratio

from bot.policy import Policy
from tests.scenarios.test_app import make_tools
from tests.support.harness import running_bot
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import METHOD_LIMITS, POST_MESSAGE_PER_CHANNEL, RateLimits
from tests.support.storms import (
    Check,
    Storm,
    alerts_in_one_channel,
    alerts_over_channels,
    approvals_burst,
    home_policy,
    home_tabs,
    long_answers,
    problems,
)

SPEED = 6.0
BAR = 1.2
HOME_PEOPLE = 20


def floor_seconds(slack: SlackAPIStandIn) -> tuple[float, str]:
    """The longest bucket's drain, in clock seconds, for the calls Slack applied; and which."""
    per_method: Counter[str] = Counter()
    per_channel: Counter[str] = Counter()
    for call in slack.calls:
        if not call.ok:
            continue
        if call.method == "chat.postMessage":
            per_channel[str(call.params.get("channel"))] += 1
        elif call.method in METHOD_LIMITS:
            per_method[call.method] += 1
    longest, which = 0.0, "-"
    for method, n in per_method.items():
        limit = METHOD_LIMITS[method]
        if (seconds := (n - limit.burst) * limit.seconds_per_call) > longest:
            longest, which = seconds, f"{method} x{n}"
    for channel, n in per_channel.items():
        limit = POST_MESSAGE_PER_CHANNEL
        if (seconds := (n - limit.burst) * limit.seconds_per_call) > longest:
            longest, which = seconds, f"chat.postMessage {channel} x{n}"
    return max(longest, 0.0) / SPEED, which


StormRun = Callable[[Storm], Awaitable[Check]]
"""Sends a storm; returns what to check once it drained (problems, in words)."""

STORMS: list[tuple[str, StormRun, str | None]] = [
    ("60 alerts over 20 channels", lambda s: alerts_over_channels(s, 60, channels=20), None),
    ("60 alerts in one channel, an approval each", lambda s: alerts_in_one_channel(s, 60), None),
    ("30 approvals in a burst", lambda s: approvals_burst(s, 30, channels=10), None),
    ("6 answers of 30,000 characters", lambda s: long_answers(s, 6, chars=30_000), None),
    (
        f"{HOME_PEOPLE} Home tabs after {HOME_PEOPLE} decisions",
        lambda s: home_tabs(s, HOME_PEOPLE),
        home_policy(HOME_PEOPLE),
    ),
]


async def run(name: str, send: StormRun, policy: str | None, table: Table, checks: Checks) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        limits = RateLimits(speed=SPEED)
        async with (
            SlackAPIStandIn(rate_limits=limits) as slack,
            running_bot(
                Path(tmp),
                tools=make_tools(Path(tmp)),
                slack=slack,
                policy=Policy.from_toml(policy) if policy else None,
            ) as bot,
        ):
            storm = Storm(bot)
            started = time.monotonic()
            check = await send(storm)
            await bot.settle(timeout=900)
            drained = time.monotonic() - started
            floor, bucket = floor_seconds(slack)
            found = check() + problems(storm)
            refused = sum(limits.refused.values())
            ack = f"{max(storm.acks):.2f} s" if storm.acks else "-"
            times = (f"{drained:.1f} s", f"{floor:.1f} s", ratio(drained, floor))
            table.add(name, *times, bucket, refused, ack)
            lost = "; ".join(found[:3])
            checks.check(not found, f"{name}: nothing lost {lost}".strip())
            checks.check(drained <= BAR * floor + 0.5, f"{name}: within {BAR}x of the floor")


async def main() -> None:
    print(machine())
    print(f"Slack's tiers at {SPEED}x speed (stand-in and pacer alike)")
    table = Table("storm", "drained", "floor", "ratio", "floor's bucket", "429s", "slowest ack")
    checks = Checks()
    for name, send, policy in STORMS:
        await run(name, send, policy, table, checks)
    table.print()
    checks.exit_on_failure()


if __name__ == "__main__":
    asyncio.run(main())
