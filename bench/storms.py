"""Storms against the Slack stand-in that enforces Slack's tiers: `python bench/storms.py`
(SQLite, one process), `python bench/storms.py --replicas` (three replicas on one PostgreSQL
database, spending the workspace's budget together through it: `SlackBudgets`),
`--only WORDS` (the storms whose name holds WORDS).

Each storm goes through the real app (`running_bot`'s parts: Bolt, the listeners, the run
service, the outbox and its paced sender, the database) against
`SlackAPIStandIn(rate_limits=...)`, whose buckets are Slack's published limits
(`tests.support.slack_ratelimits`: `chat.postMessage` about one a second per channel, bursts of
3; `chat.update` Tier 3, 50 a minute for the workspace, bursts of 10; `chat.startStream` and
`chat.stopStream` Tier 2, 20 a minute, bursts of 5; `views.publish` Tier 4). The drain runs from
the first event sent until every run has finished and the outbox is empty.

The floor is what Slack's limits impose on the fewest calls the storm's threads need, not on the
calls the bot chose: one `chat.postMessage` per answer (a long answer: one per `MAX_STREAMED`
characters, at most `MAX_MESSAGES`, the rest in a file), one per approval card, one
`chat.update` per decided card, one `views.publish` per Home tab shown. For each bucket (per
channel for `chat.postMessage`, per workspace for the others) `(calls - burst) / rate`; the
floor is the longest of them, or the time the storm's last event (a mention, a click, a Home
tab opened) was acknowledged when that is later (the bot cannot answer what has not arrived),
or the same storm's drain with no call ever waiting (buckets `ALONE` times faster: the bot's own
work, which no choice of calls can beat) when that is longer. After a restart, the posts the
process before it made still count against each channel's bucket (the stand-in's, at the
restart).
Where every card is decided in the storm's last burst of clicks, their redraws (and the Home
tabs the decisions change) can only follow it: the floor is then at least that arrival plus
those calls' own drain. Times are in Slack's seconds: `--speed` above 1 runs the buckets
faster than the clock on both sides (stand-in and pacer), so a storm of Slack minutes takes
clock seconds, but the bot's own work runs at the clock's pace and so weighs that many times
more than against Slack; the default is Slack's own pace. Beside each storm: the calls the
bot made per method (applied ones) over the fewest needed.

Each storm (`tests.support.storms`, which `make test` runs small) is then checked: every answer
whole once, every command output shown, no card with buttons after its decision, no stream left
open, no 👀 left, nothing dropped, no 429 told, every ack within 3 s; and the drain within
`BAR` times the floor.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import math
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from _common import Checks, Table, machine, ratio

from bot.observability import Metrics
from bot.policy import Policy
from bot.server import http_app, started
from bot.settings import Settings
from bot.slack.mrkdwn import user_mention
from bot.slack.pacing import Pacer
from bot.slack.streaming import MAX_MESSAGES, MAX_STREAMED
from bot.store import utc_now
from bot.wiring import open_deps
from tests.scenarios.test_app import make_tools
from tests.support.harness import SECRET, Bot
from tests.support.llm_server import LLMStandIn
from tests.support.loopback import serve_on_loopback
from tests.support.postgres import PostgresCluster, find_bin_dir
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
    restart_answers,
)

SPEED = 1.0
ALONE = 1e6
"""The speed of the run that weighs the bot alone: Slack's buckets (stand-in and pacer) refill
a million times faster than the clock, so no call waits and the drain is the bot's own work."""
BAR = 1.2
LOOK_AGAIN = 0.1
"""Seconds between the settling fleet's requests that its outbox senders look again."""
HOME_PEOPLE = 20
SHOWN = (
    "chat.postMessage",
    "chat.update",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
    "reactions.add",
    "reactions.remove",
    "views.publish",
    "files.completeUploadExternal",
    "assistant.threads.setStatus",
)


@dataclass(frozen=True)
class Needs:
    """The fewest calls a storm's threads need: posts per channel, and workspace-wide calls."""

    posts: tuple[int, ...]
    calls: Mapping[str, int] = field(default_factory=dict)
    after: Mapping[str, int] = field(default_factory=dict)
    """Of `calls`, those that can only follow the storm's last event (the redraws of cards all
    decided in its last burst of clicks, the Home tabs those decisions change)."""

    def floor(self, arrival: float, spent: float = 0.0) -> tuple[float, str]:
        """The longest bucket's drain in Slack seconds, or the last event's `arrival` (plus
        the drain of the calls only it allows), and which it is. `spent`: of each channel's
        post burst, what calls before the storm had spent (a restart's)."""
        longest, which = arrival, "the last event's arrival"
        for method, n in self.after.items():
            limit = METHOD_LIMITS[method]
            if (seconds := arrival + max(0, n - limit.burst) * limit.seconds_per_call) > longest:
                longest, which = seconds, f"the last event, then {method} x{n}"
        for method, n in self.calls.items():
            limit = METHOD_LIMITS[method]
            if (seconds := (n - limit.burst) * limit.seconds_per_call) > longest:
                longest, which = seconds, f"{method} x{n}"
        post = POST_MESSAGE_PER_CHANNEL
        for n in self.posts:
            if (seconds := (n + spent - post.burst) * post.seconds_per_call) > longest:
                longest, which = seconds, f"chat.postMessage x{n} in a channel"
        return longest, which

    def total(self) -> Counter[str]:
        out = Counter({"chat.postMessage": sum(self.posts)})
        out.update(self.calls)
        return out


def _spread(items: int, channels: int) -> tuple[int, ...]:
    return tuple(len(range(c, items, channels)) for c in range(channels))


def _long_answers(n: int, chars: int) -> Needs:
    """`n` answers of `chars` characters, one per channel: messages of `MAX_STREAMED`
    characters, at most `MAX_MESSAGES`, the whole answer attached when it is longer."""
    files = n if chars > MAX_MESSAGES * MAX_STREAMED else 0
    posts = min(MAX_MESSAGES, math.ceil(chars / MAX_STREAMED))
    return Needs((posts,) * n, {"files.completeUploadExternal": files} if files else {})


StormRun = Callable[[Storm], Awaitable[Check]]
"""Sends a storm; returns what to check once it drained (problems, in words)."""


@dataclass(frozen=True)
class StormCase:
    name: str
    send: StormRun
    needs: Needs
    policy: str | None = None
    restart: bool = False
    """Its runs are cut by a restart first: the drain is timed from the new start."""


def _approved(n: int, channels: int, *, at_once: bool = False) -> Needs:
    """`n` alerts, each a card, its redraw and one answer; `at_once`: every card decided in
    the storm's last burst of clicks (no redraw can come before it)."""
    redraws = {"chat.update": n}
    return Needs(tuple(2 * k for k in _spread(n, channels)), redraws, redraws if at_once else {})


STORMS: list[StormCase] = [
    StormCase(
        "60 alerts in one channel",
        lambda s: alerts_over_channels(s, 60, channels=1),
        Needs((60,)),
    ),
    StormCase(
        "60 alerts over 20 channels",
        lambda s: alerts_over_channels(s, 60, channels=20),
        Needs(_spread(60, 20)),
    ),
    StormCase(
        "60 alerts in one channel, an approval each",
        lambda s: alerts_in_one_channel(s, 60),
        _approved(60, 1),
    ),
    StormCase(
        "30 approvals in a burst over 10 channels",
        lambda s: approvals_burst(s, 30, channels=10),
        _approved(30, 10, at_once=True),
    ),
    StormCase(
        "6 answers of 30,000 characters",
        lambda s: long_answers(s, 6, chars=30_000),
        _long_answers(6, 30_000),
    ),
    StormCase(
        f"{HOME_PEOPLE} Home tabs after {HOME_PEOPLE} decisions",
        lambda s: home_tabs(s, HOME_PEOPLE),
        Needs(
            tuple(2 * k for k in _spread(HOME_PEOPLE, 4)),
            {"chat.update": HOME_PEOPLE, "views.publish": 2 * HOME_PEOPLE},
            {"chat.update": HOME_PEOPLE, "views.publish": HOME_PEOPLE},
        ),
        home_policy(HOME_PEOPLE),
    ),
    StormCase(
        "40 answers after a restart, 4 channels",
        lambda s: restart_answers(s, 40, channels=4),
        Needs(_spread(40, 4)),
        restart=True,
    ),
]


@dataclass
class Fleet:
    """The bots of one storm (one, or three replicas on one database) and their stand-ins."""

    bots: list[Bot]

    async def settle(self, timeout: float = 900) -> None:
        """Until every bot has no listener, run or outbox row left (rows of one replica may be
        sent by another: go round until a whole round found all idle). A sender waiting for a
        row to settle sleeps until it is due, though another replica may have superseded and
        sent it meanwhile (a queued notice's post by its last word): it would find nothing
        then. What the storm still owes is what is measured, so the senders are asked to look
        again every `LOOK_AGAIN` seconds while the fleet settles."""
        waker = asyncio.create_task(self._look_again())
        try:
            await self._settle(timeout)
        finally:
            waker.cancel()
            await asyncio.gather(waker, return_exceptions=True)

    async def _look_again(self) -> None:
        while True:
            await asyncio.sleep(LOOK_AGAIN)
            for bot in self.bots:
                bot.service.ctx.output.outbox.wake()

    async def _settle(self, timeout: float) -> None:
        while True:
            for bot in self.bots:
                await bot.settle(timeout=timeout)
            outboxes = [bot.service.ctx.output.outbox for bot in self.bots]
            store = self.bots[0].deps.store
            stats = await store.outbox_stats()
            # A run queued behind a slot another replica frees is started by that one's poll.
            waiting = await store.queue_items(states=["queued", "started"])
            if all(o.idle for o in outboxes) and not sum(stats.depth.values()) and not waiting:
                return
            await asyncio.sleep(0.05)  # another replica's rows: their sender polls

    def dropped(self) -> int:
        return sum(sum(bot.service.ctx.output.outbox.dropped.values()) for bot in self.bots)


@contextlib.asynccontextmanager
async def _bot(
    db: str,
    workdir: Path,
    llm: LLMStandIn,
    slack: SlackAPIStandIn,
    share: float,
    policy: str | None,
    speed: float,
) -> AsyncIterator[Bot]:
    """`tests.support.harness.running_bot`, with its pacer at the stand-in's speed (on
    PostgreSQL the replicas' budget is shared through the database, as `bot.wiring` does)."""
    async with contextlib.AsyncExitStack() as stack:
        settings = Settings(
            slack_bot_token="xoxb-test-token",
            slack_signing_secret=SECRET,
            slack_api_url=slack.url,
            openai_base_url=llm.base_url,
            openai_api_key="sk-test",
            opsgate_model="test-model",
            opsgate_db=db,
            opsgate_slack_share=share,
            _env_file=None,
        )
        deps = await stack.enter_async_context(
            open_deps(
                settings,
                tools=make_tools(workdir),
                policy=Policy.from_toml(policy) if policy else None,
                clock=utc_now,
                person=user_mention,
                observer=Metrics(),
            )
        )
        shared = deps.store if deps.store.budgets_shared else None
        pacer = Pacer(speed=speed, share=share, shared=shared)
        running = await stack.enter_async_context(
            started(settings, deps, expiry_interval=3600, shutdown_grace=0, pacer=pacer)
        )
        runner, base_url = await serve_on_loopback(
            http_app(
                running.app, store=deps.store, metrics=running.metrics, health=deps.write_health
            )
        )
        stack.push_async_callback(runner.cleanup)
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        yield Bot(base_url, llm, slack, deps, http, running.service, running.metrics, running.app)


@contextlib.asynccontextmanager
async def _fleet(
    dbs: list[str],
    workdir: Path,
    llm: LLMStandIn,
    slack: SlackAPIStandIn,
    policy: str | None,
    speed: float,
) -> AsyncIterator[Fleet]:
    async with contextlib.AsyncExitStack() as stack:
        bots = [
            await stack.enter_async_context(_bot(db, workdir, llm, slack, 1.0, policy, speed))
            for db in dbs
        ]
        yield Fleet(bots)


class FleetStorm(Storm):
    """A storm whose events go round the replicas, as a load balancer would spread them."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__(fleet.bots[0])
        self.fleet = fleet
        self._next = 0
        self._mentions = 0

    def _pick(self) -> Bot:
        bot = self.fleet.bots[self._next % len(self.fleet.bots)]
        self._next += 1
        return bot

    async def mention(self, text: str, channel: str, user: str = "U0ALICE") -> str:
        # Each `Bot` numbers its messages from 1: the fleet's must not share a ts.
        self._mentions += 1
        self.channels.add(channel)
        ts = f"17{self._mentions:08d}.000100"
        return await self.timed(self._pick().mention(text, channel=channel, user=user, ts=ts))

    async def approve(self, ledger_id: str, user: str = "U0BOB") -> None:
        response = await self.timed(self._pick().click("opsgate_approve", ledger_id, user=user))
        assert response.status_code == 200, response.text


def timed_calls(slack: SlackAPIStandIn) -> list[tuple[float, str]]:
    """(when, method) of every call the stand-in applies from now on."""
    times: list[tuple[float, str]] = []
    record = slack._record

    async def recorded(call: Any) -> None:
        if call.ok:
            times.append((time.monotonic(), call.method))
        await record(call)

    slack._record = recorded  # type: ignore[method-assign]
    return times


def tail(times: list[tuple[float, str]], started_at: float) -> str:
    """When each of the last methods called made its last call (what the drain waited on)."""
    last: dict[str, float] = {}
    for at, method in times:
        last[method] = at
    ends = sorted(last.items(), key=lambda item: -item[1])[:3]
    return ", ".join(f"{m.split('.', 1)[1]} {(at - started_at) * SPEED:.0f}" for m, at in ends)


def made(slack: SlackAPIStandIn) -> Counter[str]:
    """The calls Slack applied, per method."""
    return Counter(c.method for c in slack.calls if c.ok)


def calls_cell(done: Counter[str], needs: Needs) -> str:
    needed = needs.total()
    cells = []
    for method in SHOWN:
        if done[method] or needed[method]:
            short = method.split(".", 1)[1]
            cells.append(f"{short} {done[method]}/{needed[method]}")
    return ", ".join(cells)


@dataclass
class Result:
    name: str
    drained: float
    floor: float
    bucket: str
    calls: str
    tail: str
    refused: str
    ack: str
    slack: float = 0.0
    """The floor Slack's limits alone impose (`floor` is this or the bot's own work)."""


async def run(
    case: StormCase,
    dbs: Callable[[], Awaitable[list[str]]],
    checks: Checks,
    speed: float = 0.0,
) -> Result:
    """One drain of `case` with Slack's buckets at `speed` (`SPEED` when 0); its times in
    Slack's seconds at `SPEED`."""
    speed = speed or SPEED
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        limits = RateLimits(speed=speed)
        async with LLMStandIn() as llm, SlackAPIStandIn(rate_limits=limits) as slack:
            times = timed_calls(slack)
            urls = await dbs()
            urls = [u.replace("{tmp}", tmp) for u in urls]
            started_at = time.monotonic()
            storm: Storm | None = None
            spent = 0.0
            if case.restart:
                async with _fleet(urls, workdir, llm, slack, case.policy, speed) as fleet:
                    storm = FleetStorm(fleet)
                    check = await case.send(storm)  # the runs are waiting on the model
                started_at = time.monotonic()
                # What the process before the restart posted is spent in Slack's buckets.
                spent = min(limits.posts_spent(c) for c in storm.channels)
            async with _fleet(urls, workdir, llm, slack, case.policy, speed) as fleet:
                fresh = FleetStorm(fleet)
                if storm is None:
                    storm, check = fresh, await case.send(fresh)
                else:
                    storm.bot, storm.fleet = fleet.bots[0], fleet  # type: ignore[attr-defined]
                    llm_release(llm)
                # The restart is its storm's last event: the mentions came before it.
                last_event = max(storm.arrived, time.monotonic() if case.restart else 0.0)
                await fleet.settle()
                drained = (time.monotonic() - started_at) * SPEED
                found = check() + problems(storm, dropped=fleet.dropped())
        floor, bucket = case.needs.floor((last_event - started_at) * SPEED, spent)
        ack = f"{max(storm.acks):.2f} s" if storm.acks else "-"
        what = case.name if speed == SPEED else f"{case.name}, the bot alone"
        checks.check(not found, f"{what}: nothing lost {'; '.join(found[:3])}".strip())
        refused = ", ".join(f"{m} {n}" for m, n in sorted(limits.refused.items())) or "0"
        done = calls_cell(made(slack), case.needs)
        return Result(
            case.name, drained, floor, bucket, done, tail(times, started_at), refused, ack, floor
        )


async def weighed(
    case: StormCase, dbs: Callable[[], Awaitable[list[str]]], checks: Checks
) -> tuple[Result, float]:
    """`case` drained against Slack's limits, its floor the longer of what those limits impose
    and the bot's own work: the same storm's drain with no call ever waiting (`ALONE`), which
    no choice of calls can beat. Also that drain."""
    alone = (await run(case, dbs, checks, speed=ALONE)).drained
    result = await run(case, dbs, checks)
    if alone > result.floor:
        result.floor, result.bucket = alone, "the bot alone, no call waiting"
    checks.check(result.drained <= BAR * result.floor, f"{case.name}: within {BAR}x of the floor")
    return result, alone


def llm_release(llm: LLMStandIn) -> None:
    """The model answers the restarted bot's runs (`restart_answers` queued them held)."""
    gate: Any = getattr(llm, "restart_gate", None)
    if gate is not None:
        gate.set()


async def main() -> None:
    global SPEED
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", action="store_true", help="three replicas on PostgreSQL")
    parser.add_argument("--only", default="", help="run the storms whose name holds this")
    parser.add_argument("--speed", type=float, default=SPEED, help="Slack seconds a second")
    args = parser.parse_args()
    SPEED = args.speed
    cases = [c for c in STORMS if args.only in c.name]
    print(machine())
    print(f"Slack's tiers at {SPEED}x speed (stand-in and pacer alike); seconds are Slack's")
    table = Table(
        "storm",
        "drained",
        "floor",
        "ratio",
        "floor's bucket",
        "Slack's floor",
        "bot alone",
        "429s",
        "slowest ack",
    )
    calls = Table("storm", "calls made/needed (applied)", "last calls (s)")
    checks = Checks()
    results: list[tuple[Result, float]] = []
    async with contextlib.AsyncExitStack() as stack:
        if args.replicas:
            print("three replicas on one PostgreSQL database, one Slack budget shared there")
            cluster = stack.enter_context(PostgresCluster(find_bin_dir()))

            async def dbs() -> list[str]:
                return [await cluster.create_database()] * 3
        else:
            print("one process on SQLite")

            async def dbs() -> list[str]:
                return ["{tmp}/opsgate.db"]

        for case in cases:
            results.append(await weighed(case, dbs, checks))
    for r, alone in results:
        times = (f"{r.drained:.1f} s", f"{r.floor:.1f} s", ratio(r.drained, r.floor))
        table.add(r.name, *times, r.bucket, f"{r.slack:.1f} s", f"{alone:.1f} s", r.refused, r.ack)
        calls.add(r.name, r.calls, r.tail)
    table.print()
    print()
    calls.print()
    checks.exit_on_failure()


if __name__ == "__main__":
    asyncio.run(main())
