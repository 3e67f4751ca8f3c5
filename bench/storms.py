"""Storms against the Slack stand-in that enforces Slack's tiers: `python bench/storms.py`.

Each storm is run through the real app (`running_bot`: Bolt, the listeners, the run service,
the outbox and its paced sender, the SQLite file) against `SlackAPIStandIn(rate_limits=...)`
(bursts of 5, 10 and 20 for Tiers 2, 3 and 4, 3 per channel for `chat.postMessage`). The drain
time runs from the first event sent until every run has finished and the outbox is empty. The
floor is what Slack's limits impose on the calls the storm needed: for each bucket (method, and
channel for `chat.postMessage`), `(calls - burst) / rate`, the longest of them. `SPEED` runs the
buckets faster than the clock on both sides (the stand-in and the bot's pacer), so a storm of
Slack minutes takes seconds; the ratio does not depend on it. The bar (issue 20) is 1.2x.
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
from typing import Any

from _common import Checks, Table, machine, ratio
from aiohttp import web

from tests.scenarios.test_app import BOB, make_tools
from tests.scenarios.test_storms import FINE, _answer, _last_user, _tool_call, thread_text
from tests.support.harness import Bot, running_bot
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import METHOD_LIMITS, POST_MESSAGE_PER_CHANNEL, RateLimits

SPEED = 6.0
BAR = 1.2


def floor_seconds(slack: SlackAPIStandIn) -> float:
    """The longest bucket's drain, in clock seconds, for the calls Slack applied."""
    per_method: Counter[str] = Counter()
    per_channel: Counter[str] = Counter()
    for call in slack.calls:
        if not call.ok:
            continue
        if call.method == "chat.postMessage":
            per_channel[str(call.params.get("channel"))] += 1
        elif call.method in METHOD_LIMITS:
            per_method[call.method] += 1
    longest = 0.0
    for method, n in per_method.items():
        limit = METHOD_LIMITS[method]
        longest = max(longest, (n - limit.burst) * limit.seconds_per_call)
    for n in per_channel.values():
        limit = POST_MESSAGE_PER_CHANNEL
        longest = max(longest, (n - limit.burst) * limit.seconds_per_call)
    return max(longest, 0.0) / SPEED


Storm = Callable[[Bot], Awaitable[Callable[[], list[str]]]]
"""Sends a storm; returns what to check once it drained (problems, in words)."""


async def alerts_over_channels(bot: Bot) -> Callable[[], list[str]]:
    async def answer(body: dict[str, Any]) -> web.StreamResponse:
        n = _last_user(body).rsplit(" ", 1)[-1]
        return _answer(body, f"Checked host-{n}: " + FINE)

    for _ in range(60):
        bot.llm.reply_with(answer)
    roots = await asyncio.gather(
        *(bot.mention(f"alert {i}", channel=f"C0STORM{i % 20:02d}") for i in range(60))
    )

    def check() -> list[str]:
        return [
            f"answer {i} shown {n} times"
            for i, root in enumerate(roots)
            if (n := thread_text(bot.slack, root).count(f"Checked host-{i}: {FINE}")) != 1
        ]

    return check


async def approvals_burst(bot: Bot) -> Callable[[], list[str]]:
    async def turn(body: dict[str, Any]) -> web.StreamResponse:
        if body["messages"][-1]["role"] == "tool":
            return _answer(body, "Done: " + str(body["messages"][-1]["content"])[:60])
        n = _last_user(body).rsplit(" ", 1)[-1]
        return _tool_call(body, f"echo output-{n}")

    for _ in range(60):
        bot.llm.reply_with(turn)
    await asyncio.gather(*(bot.mention(f"job {i}", channel=f"C0JOBS{i % 10}") for i in range(30)))
    cards = await bot.wait_cards(30, timeout=300)
    await asyncio.gather(*(bot.click("opsgate_approve", c["ledger_id"], user=BOB) for c in cards))

    def check() -> list[str]:
        shown = "\n".join(str(m.get("text")) for m in bot.slack.messages)
        problems = [f"output {i} not shown" for i in range(30) if f"output-{i}" not in shown]
        live = [
            m
            for m in bot.slack.messages
            if any(b.get("type") == "actions" for b in m.get("blocks") or [])
        ]
        return problems + [f"{len(live)} cards keep their buttons"] * bool(live)

    return check


async def long_answers(bot: Bot) -> Callable[[], list[str]]:
    text = ("Line of the long answer. " * 1200)[:30_000]

    async def answer(body: dict[str, Any]) -> web.StreamResponse:
        return _answer(body, text)

    for _ in range(6):
        bot.llm.reply_with(answer)
    roots = await asyncio.gather(
        *(bot.mention(f"explain {i}", channel=f"C0LONG{i}") for i in range(6))
    )

    def check() -> list[str]:
        out = []
        for root in roots:
            shown = thread_text(bot.slack, root).replace("\n", "")
            if shown.count("Line of the long answer.") < 1100:
                out.append(f"thread {root} shows {len(shown)} characters")
        return out

    return check


STORMS: list[tuple[str, Storm]] = [
    ("60 alerts over 20 channels", alerts_over_channels),
    ("30 approvals in a burst", approvals_burst),
    ("6 answers of 30,000 characters", long_answers),
]


async def run(name: str, storm: Storm, table: Table, checks: Checks) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        limits = RateLimits(speed=SPEED)
        async with (
            SlackAPIStandIn(rate_limits=limits) as slack,
            running_bot(Path(tmp), tools=make_tools(Path(tmp)), slack=slack) as bot,
        ):
            started = time.monotonic()
            check = await storm(bot)
            await bot.settle(timeout=900)
            drained = time.monotonic() - started
            floor = floor_seconds(slack)
            problems = check()
            dropped = bot.service.ctx.output.outbox.dropped  # type: ignore[attr-defined]
            refused = sum(limits.refused.values())
            table.add(name, f"{drained:.1f} s", f"{floor:.1f} s", ratio(drained, floor), refused)
            lost = "; ".join(problems[:3]) or (f"dropped {dropped}" if dropped else "")
            checks.check(not problems and not dropped, f"{name}: nothing lost {lost}".strip())
            checks.check(drained <= BAR * floor + 0.5, f"{name}: within {BAR}x of the floor")


async def main() -> None:
    print(machine())
    print(f"Slack's tiers at {SPEED}x speed (stand-in and pacer alike)")
    table = Table("storm", "drained", "floor", "ratio", "429s")
    checks = Checks()
    for name, storm in STORMS:
        await run(name, storm, table, checks)
    table.print()
    checks.exit_on_failure()


if __name__ == "__main__":
    asyncio.run(main())
