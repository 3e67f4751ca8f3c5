"""Replicas: `python bench/replicas.py` (about 1-2 min).

Real `opsgate run --http` processes, in one run: one on SQLite (the default), one on PostgreSQL,
and three on one PostgreSQL database (requests spread round-robin over their ports, as a load
balancer would). For each:

- threads/s: 150 mentions in 15 channels (a new thread each) sent at once; the clock stops when
  every thread has its answer;
- decisions/s: 90 threads paused on an approval card (not timed); then all 90 Approve clicks at
  once, and the clock stops when every resumed run has run its tool and answered.

Printed beside each other with the ratios to the SQLite process. Then it CHECKS (exits non-zero
on failure) that every thread was answered exactly once and every approved call ran once.

The LLM and Slack stand-ins run in this process, so their work is inside every figure and they
may be what limits three replicas (see the CPU count on the first line). Each channel runs at
most 2 runs at once (`concurrency`); leases are the defaults (30 s, heartbeat 10 s).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx

from bench._common import Checks, Table, machine, ratio
from tests.support.postgres import PostgresCluster, find_bin_dir
from tests.support.replicas import ReplicaSet, card_of, scripted_llm
from tests.support.slack_api import SlackAPIStandIn

THREADS = 150
DECISIONS = 90
CHANNELS = 15
SENDERS = 50
TIMEOUT = 300.0


@dataclass(frozen=True)
class Figures:
    label: str
    threads_per_s: float
    decisions_per_s: float


def _answers(slack: SlackAPIStandIn, prefix: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for message in slack.messages:
        text = str(message.get("text", ""))
        if text.startswith(prefix):
            counts[text] = counts.get(text, 0) + 1
    return counts


async def _until(slack: SlackAPIStandIn, ready: Callable[[], bool]) -> None:
    await slack.wait_until(ready, timeout=TIMEOUT)


async def _spread(bots: ReplicaSet, bodies: list[tuple[bytes, str]], kind: str) -> None:
    """Send every body at once (at most SENDERS in flight), round-robin over the replicas."""
    gate = asyncio.Semaphore(SENDERS)

    async def send(n: int, body: bytes) -> None:
        async with gate:
            replica = bots.replicas[n % len(bots.replicas)]
            response = await bots.post(replica, body, kind)
            response.raise_for_status()

    await asyncio.gather(*(send(n, body) for n, (body, _) in enumerate(bodies)))


@contextlib.asynccontextmanager
async def _bots(db: str, workdir: Path, count: int) -> AsyncIterator[ReplicaSet]:
    async with (
        scripted_llm(replies=2 * THREADS + 3 * DECISIONS + 10) as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=SENDERS)) as http,
    ):
        bots = ReplicaSet(db, workdir, llm, slack, http, count=count, lease=30, heartbeat=10)
        try:
            await bots.start()
            yield bots
        finally:
            await bots.stop()


async def _measure(label: str, db: str, workdir: Path, count: int, checks: Checks) -> Figures:
    async with _bots(db, workdir, count) as bots:
        slack = bots.slack
        questions = [
            bots.mention_body(f"question {n}", channel=f"C0CH{n % CHANNELS:02d}")
            for n in range(THREADS)
        ]
        start = time.perf_counter()
        await _spread(bots, questions, "application/json")
        await _until(slack, lambda: len(_answers(slack, "ANSWER")) >= THREADS)
        threads_s = time.perf_counter() - start

        asks = [
            bots.mention_body(f"deploy s{n}", channel=f"C0CH{n % CHANNELS:02d}")
            for n in range(DECISIONS)
        ]
        await _spread(bots, asks, "application/json")
        await slack.wait_for(
            "chat.postMessage",
            count=DECISIONS,
            where=lambda c: c.ok and card_of(c.params, c.response) is not None,
            timeout=TIMEOUT,
        )
        cards = [
            card
            for c in slack.calls_to("chat.postMessage")
            if c.ok and (card := card_of(c.params, c.response)) is not None
        ]
        clicks = [(await _click_body(bots, card), "") for card in cards]
        start = time.perf_counter()
        await _spread(bots, clicks, "application/x-www-form-urlencoded")
        await _until(slack, lambda: len(_answers(slack, "DONE")) >= DECISIONS)
        decisions_s = time.perf_counter() - start
    answered = _answers(slack, "ANSWER")
    done = _answers(slack, "DONE")
    checks.check(
        len(answered) == THREADS and set(answered.values()) == {1},
        f"{label}: every thread answered exactly once",
    )
    ran = [what for _, what in bots.ran()]
    checks.check(
        len(done) == DECISIONS and sorted(ran) == sorted(f"deploy s{n}" for n in range(DECISIONS)),
        f"{label}: every approved call ran exactly once and was answered",
    )
    return Figures(label, THREADS / threads_s, DECISIONS / decisions_s)


async def _click_body(bots: ReplicaSet, card: dict[str, str]) -> bytes:
    from tests.support.slack_requests import block_actions, interaction_body

    payload = block_actions(
        "opsgate_approve",
        card["ledger_id"],
        user="U0BOB",
        channel=card["channel"],
        message_ts=card["ts"],
        response_url=bots.slack.response_url("bench-click"),
    )
    return interaction_body(payload)


async def main() -> None:
    print(machine(), flush=True)
    checks = Checks()
    results: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="opsgate-bench-") as tmp:
        root = Path(tmp)
        (root / "sqlite").mkdir()
        results.append(
            await _measure(
                "SQLite, 1 process", str(root / "sqlite" / "opsgate.db"), root / "sqlite", 1, checks
            )
        )
        bin_dir = find_bin_dir()
        if bin_dir is None:
            print("PostgreSQL server binaries not installed: only the SQLite figures", flush=True)
        else:
            with PostgresCluster(bin_dir) as cluster:
                for count in (1, 3):
                    workdir = root / f"pg{count}"
                    workdir.mkdir()
                    url = await cluster.create_database()
                    label = f"PostgreSQL, {count} replica{'s' if count > 1 else ''}"
                    results.append(await _measure(label, url, workdir, count, checks))
    base = results[0]
    table = Table("store", "threads/s", "vs SQLite", "decisions/s", "vs SQLite")
    for figures in results:
        table.add(
            figures.label,
            f"{figures.threads_per_s:.1f}",
            ratio(figures.threads_per_s, base.threads_per_s),
            f"{figures.decisions_per_s:.1f}",
            ratio(figures.decisions_per_s, base.decisions_per_s),
        )
    table.print()
    if len(results) == 3:
        one, three = results[1], results[2]
        threads = ratio(three.threads_per_s, one.threads_per_s)
        decisions = ratio(three.decisions_per_s, one.decisions_per_s)
        print(
            f"3 replicas vs 1 on PostgreSQL: threads {threads}, decisions {decisions}", flush=True
        )
    checks.exit_on_failure()


if __name__ == "__main__":
    asyncio.run(main())
