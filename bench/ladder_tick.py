"""When nobody answers, at scale: `python bench/ladder_tick.py` (about 4-5 minutes).

A store holding 10,000 waiting calls whose rule has `remind_every` and a two-step `escalate`.

(a) One timer tick (`RunService.expire_due`, what the expiry timer runs) at the moment both
steps and a reminder round are due for every one of them, against the timer's interval in
production (`EXPIRY_INTERVAL`, 15 s, or a tenth of the shortest step if shorter): the tick must
fit within it (the process's CPU seconds meanwhile are printed beside it: on a VM shared
with other jobs the tick's time is that CPU stretched by the load). Afterwards every call must
have passed each step once and sent its reminder round once (the `escalation_step` and
`reminders_sent` columns, the `escalated` and `reminded` audit rows, the direct messages owed),
and a second tick at the same moment must find nothing to do. Beside it, a tick when nothing
is due (the common case): a scan of the 10,000.

(b) The click ack (time to the HTTP 200 of signed Approve clicks, each deciding its own pending
card and resuming its run, from 50 clients in another process: the `click_ack.py` set-up) of
the real bot while 10,000 calls wait, against the same bot while 10 wait, rounds alternating.
The timer ticks every interval during both. No growth: the ratio should be near 1.

The 10,000 waiting calls are copies of real cards' rows (call and session) written straight
into the SQLite file: posting 10,000 cards through the bot would measure the posting, not the
waiting.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import contextlib
import multiprocessing
import os
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta

from _common import Checks, Table, machine, ms, p50, p99, ratio, timed
from click_ack import CLIENTS, _clicks, _fire, _ready, _Setup, restart

from bot.policy import Policy, ladder_tick
from bot.server import EXPIRY_INTERVAL
from tests.support.harness import Bot, running_bot

WAITING = 10_000
FEW = 10
SEEDS = 10
"""Real cards whose rows the waiting calls copy."""
CLICKS = 100
ROUNDS = 4
WARMUP_CARDS = 25
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

POLICY = """
[defaults]
approvers = ["U0PRIMARY", "U0SPARE"]
required_approvals = 2
allow_self_approval = true
ttl = "8h"
remind_every = "1h"
remind_max = 3
escalate = [
  {after = "1h", approvers = ["U0SECOND"]},
  {after = "2h", approvers = ["U0THIRD"], required_approvals = 1},
]
"""

CLICKED = POLICY.replace(
    'approvers = ["U0PRIMARY", "U0SPARE"]\nrequired_approvals = 2', "required_approvals = 1"
)
"""Part (b): anyone in the channel approves alone (the clickers), with the same ladder."""


class Clock:
    """The bot's clock: `now` set by the bench, moving on with real seconds meanwhile (the
    outbox sends a settling row, a Home tab, once its few seconds have passed)."""

    def __init__(self) -> None:
        self._set, self._at = T0, time.monotonic()

    @property
    def now(self) -> datetime:
        return self._set + timedelta(seconds=time.monotonic() - self._at)

    @now.setter
    def now(self, moment: datetime) -> None:
        self._set, self._at = moment, time.monotonic()

    def __call__(self) -> datetime:
        return self.now


# -- the waiting calls ------------------------------------------------------------------------


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def _fill(path: Path, count: int, tag: str) -> None:
    """Add `count` waiting calls, each a copy (call and session) of one of the seed cards."""
    db = sqlite3.connect(path, timeout=30)
    try:
        calls, sessions = _columns(db, "tool_calls"), _columns(db, "sessions")
        db.row_factory = sqlite3.Row
        seeds = db.execute(
            "SELECT * FROM tool_calls WHERE status = 'pending' AND card_ts IS NOT NULL "
            "AND id NOT LIKE 'bench-%' ORDER BY created_at LIMIT :n",
            {"n": SEEDS},
        ).fetchall()
        session_of = {
            s["id"]: dict(s)
            for s in db.execute(
                f"SELECT * FROM sessions WHERE id IN ({','.join('?' * len(seeds))})",
                [r["session_id"] for r in seeds],
            )
        }
        new_sessions, new_calls = [], []
        for i in range(count):
            seed = dict(seeds[i % len(seeds)])
            session = dict(session_of[seed["session_id"]])
            session["id"] = f"bench-{tag}-s{i}"
            session["thread_ts"] = f"19{i:08d}.{len(tag):06d}"
            session["batch_id"] = f"bench-{tag}-b{i}"  # each its own turn's batch, as in life
            seed.update(
                id=f"bench-{tag}-c{i}",
                session_id=session["id"],
                batch_id=session["batch_id"],
                call_id=f"bench_{tag}_{i}",
                card_ts=f"18{i:08d}.{len(tag):06d}",
            )
            new_sessions.append([session[c] for c in sessions])
            new_calls.append([seed[c] for c in calls])
        with db:
            db.executemany(
                f"INSERT INTO sessions VALUES ({','.join('?' * len(sessions))})", new_sessions
            )
            db.executemany(
                f"INSERT INTO tool_calls VALUES ({','.join('?' * len(calls))})", new_calls
            )
    finally:
        db.close()


def _empty(path: Path, tag: str) -> None:
    db = sqlite3.connect(path, timeout=30)
    try:
        with db:
            db.execute("DELETE FROM tool_calls WHERE id LIKE :p", {"p": f"bench-{tag}-%"})
            db.execute("DELETE FROM sessions WHERE id LIKE :p", {"p": f"bench-{tag}-%"})
    finally:
        db.close()


async def _seed(bot: Bot) -> _Setup:
    """The real cards the waiting calls copy; the set-up that makes more."""
    setup = _Setup(bot)
    await setup.pending_cards(SEEDS)
    return setup


# -- (a) one tick -----------------------------------------------------------------------------


def _owed(details: list[dict[str, object]], key: str) -> int:
    return sum(len(d.get(key) or ()) for d in details)  # type: ignore[arg-type]


async def _tick(tmp: Path, checks: Checks) -> tuple[float, float, float, float]:
    """Seconds of a tick with nothing due, of the tick that drives every step and reminder
    (and the CPU seconds the process spent meanwhile: on a machine shared with other jobs
    the tick's time is that CPU stretched by the load), and of the tick after it."""
    clock = Clock()
    policy = Policy.from_toml(POLICY)
    async with running_bot(tmp, tools=[restart], policy=policy, clock=clock) as bot:
        await _seed(bot)
        await bot.settle(timeout=60)
        await asyncio.to_thread(_fill, tmp / "opsgate.db", WAITING - SEEDS, "a")
        store = bot.deps.store
        checks.check(len(await store.waiting_calls()) == WAITING, f"{WAITING:,} calls wait")
        idle = await timed(bot.service.expire_due())
        clock.now = T0 + timedelta(hours=2, minutes=1)  # both steps and one reminder round
        cpu = time.process_time()
        busy = await timed(bot.service.expire_due())
        cpu = time.process_time() - cpu
        again = await timed(bot.service.expire_due())
        print(
            f"ticks: idle {idle:.2f} s, busy {busy:.2f} s ({cpu:.2f} s of CPU, "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs), "
            f"after {again:.2f} s",
            flush=True,
        )
        rows = await store.waiting_calls()
        steps = sorted({r.escalation_step for r in rows})
        rounds = sorted({r.reminders_sent for r in rows})
        checks.check(len(rows) == WAITING, f"all {WAITING:,} still wait ({len(rows):,})")
        checks.check(steps == [2] and rounds == [2], f"steps {steps}, reminder rounds {rounds}")
        audit = await store.audit_rows()
        escalated = [dict(a.details) for a in audit if a.event == "escalated"]
        reminded = [dict(a.details) for a in audit if a.event == "reminded"]
        checks.check(
            len(escalated) == 2 * WAITING
            and {(d["ledger_id"], d["step"]) for d in escalated}
            == {(r.id, s) for r in rows for s in (1, 2)},
            f"each step passed once per call ({len(escalated):,} escalated rows)",
        )
        checks.check(
            len(reminded) == WAITING and len({d["ledger_id"] for d in reminded}) == WAITING,
            f"one reminder round per call ({len(reminded):,} reminded rows)",
        )
        dms = 2 * WAITING + _owed(reminded, "to")
        print(f"direct messages owed by the tick: {dms:,} (outbox rows, sent after it)")
    return idle, busy, cpu, again


# -- (b) click ack ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _ticking(bot: Bot, every: float) -> AsyncIterator[None]:
    """The timer's cadence during the clicks: a tick every `every` seconds."""

    async def loop() -> None:
        while True:
            await bot.service.expire_due()
            await asyncio.sleep(every)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _clicks_round(
    pool: ProcessPoolExecutor, setup: _Setup, url: str, count: int
) -> list[tuple[int, float]]:
    bot = setup.bot
    pending = await setup.pending_cards(count)
    for n in range(count):
        bot.llm.reply_text(f"Restarted, answer {n}.")
    loop = asyncio.get_running_loop()
    results = await loop.run_in_executor(pool, _fire, url, _clicks(pending), CLIENTS)
    await bot.settle(timeout=120)
    return results


async def _acks(
    tmp: Path, pool: ProcessPoolExecutor, tick: float, checks: Checks
) -> tuple[list[float], list[float]]:
    """Click ack seconds with WAITING and with FEW calls waiting."""
    many: list[float] = []
    few: list[float] = []
    statuses: list[int] = []
    clicks = WARMUP_CARDS + ROUNDS * CLICKS
    async with running_bot(tmp, tools=[restart], policy=Policy.from_toml(CLICKED)) as bot:
        path = tmp / "opsgate.db"
        setup = await _seed(bot)
        url = f"{bot.url}/slack/events"
        async with _ticking(bot, tick):
            await _clicks_round(pool, setup, url, WARMUP_CARDS)
            for n in range(ROUNDS):
                crowded = n % 2 == 0
                await asyncio.to_thread(_fill, path, (WAITING if crowded else FEW) - SEEDS, f"b{n}")
                results = await _clicks_round(pool, setup, url, CLICKS)
                statuses += [status for status, _ in results]
                (many if crowded else few).extend(seconds for _, seconds in results)
                await asyncio.to_thread(_empty, path, f"b{n}")
        decided = [
            row
            for row in [await bot.deps.store.get_call(c) for c in setup.seen]
            if row is not None and row.status == "done"
        ]
        ran = clicks + SEEDS - len(await bot.deps.store.waiting_calls())
        checks.check(len(decided) == ran == clicks, f"all {clicks} clicked calls ran once")
    checks.check(all(s == 200 for s in statuses), f"all {len(statuses)} clicks answered 200")
    return many, few


async def main() -> None:
    print(machine())
    checks = Checks()
    tick = min(EXPIRY_INTERVAL, ladder_tick(Policy.from_toml(POLICY), EXPIRY_INTERVAL))
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        started = time.perf_counter()
        idle, busy, cpu, again = await _tick(Path(a), checks)
        print(f"(a) took {time.perf_counter() - started:.1f} s in all")
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:
            await asyncio.get_running_loop().run_in_executor(pool, _ready)
            many, few = await _acks(Path(b), pool, tick, checks)
    table = Table("one timer tick, 10,000 waiting calls", "time", "timer interval", "share")
    table.add(
        "both steps + a reminder round due for all",
        f"{busy:.2f} s",
        f"{tick:.0f} s",
        f"{busy / tick:.0%}",
    )
    table.add(
        "— the CPU the process spent in it", f"{cpu:.2f} s", f"{tick:.0f} s", f"{cpu / tick:.0%}"
    )
    table.add(
        "the tick after it (nothing left)", f"{again:.2f} s", f"{tick:.0f} s", f"{again / tick:.0%}"
    )
    table.add(
        "nothing due (the common tick)", f"{idle:.2f} s", f"{tick:.0f} s", f"{idle / tick:.0%}"
    )
    table.print()
    print(f"goal: the busy tick fits within one interval: {'met' if busy <= tick else 'NOT met'}")
    table = Table("click ack", f"{WAITING:,} waiting", f"floor: {FEW} waiting", "ratio")
    table.add(f"p50 of {len(many)}", ms(p50(many)), ms(p50(few)), ratio(p50(many), p50(few)))
    table.add(f"p99 of {len(many)}", ms(p99(many)), ms(p99(few)), ratio(p99(many), p99(few)))
    table.print()
    met = p50(many) <= 1.3 * p50(few)
    print(f"goal: no growth, p50 ratio <= 1.3: {'met' if met else 'NOT met'}")
    checks.exit_on_failure()


if __name__ == "__main__":
    asyncio.run(main())
