"""A kill -9 of one of three replicas in the middle of a storm loses nothing.

Three real `opsgate run --http` replicas on one PostgreSQL database share the stand-in that
enforces Slack's tiers (at Slack's own pace), spending a third of the workspace's budget
together through the database (`SlackBudgets`: any of them may spend all of that). A
storm of mentions over three channels is spread across them; one replica is killed, once
answers are arriving, while it holds claimed outbox rows (Slack holds its answers to 👀
removals until then). Its lease (2 s; its outbox claims twice that) lapses, the survivors take
its work and send its rows: every thread gets its answer, finished, exactly once (a run the
kill cut before its answer was stored is asked again; one cut after it was stored and before
its ending was kept gets the one "restarted" notice), no 👀 is left, no 429 is told to anyone,
every ack came within 3 s and the outbox ends empty.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.replicas import ReplicaSet, scripted_llm
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures this module uses

COUNT = 9
CHANNELS = ("C0OPS", "C0WEB", "C0DB")
RESTARTED = "OpsGate restarted during this run"
SHARE = {"OPSGATE_SLACK_SHARE": "0.34"}
"""The replicas spend a third of the budget together: at all of it the kill lands while the
victim ends its answers, where recovery still tells a kept answer's thread it restarted."""


@pytest.mark.timeout(300)  # Tier 2 at a third: an answer every 9 s for the three
async def test_a_replica_killed_mid_storm_leaves_its_outbox_to_the_survivors(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        scripted_llm() as llm,
        SlackAPIStandIn(rate_limits=RateLimits()) as slack,
        httpx.AsyncClient(timeout=30) as http,
    ):
        bots = ReplicaSet(postgres_url, tmp_path, llm, slack, http, extra_env=SHARE)
        db = await asyncpg.connect(postgres_url)
        try:
            await bots.start()
            victim = bots[1]
            # Slack holds its answers to 👀 removals until the kill: the victim is certain to
            # die holding the rows of the ones it sends (claimed, not sent).
            unmarking = slack.hold("reactions.remove")
            threads: dict[str, str] = {}  # thread ts -> the answer it is owed
            acks: list[float] = []
            for n in range(COUNT):
                started = time.monotonic()
                ts = await bots.mention(bots[n % 3], f"question {n}", channel=CHANNELS[n % 3])
                acks.append(time.monotonic() - started)
                threads[ts] = f"ANSWER question {n}"

            # The kill comes mid-storm (answers are arriving), while the victim holds rows it
            # claimed and has not sent yet.
            claimed = f"%:{victim.pid} %"

            async def mid_storm() -> bool:
                answered = sum(_finished(slack, ts, text) for ts, text in threads.items())
                return answered >= 2 and await _held(db, claimed, live=True) >= 1

            await _until(mid_storm, timeout=120, what="answers arrive, the victim holds rows")
            await victim.kill()
            held = await _held(db, claimed)
            before = sum(_finished(slack, ts, text) for ts, text in threads.items())
            unmarking.set()

            async def drained() -> bool:
                left = await db.fetchval("SELECT count(*) FROM outbox")
                done = all(
                    _finished(slack, ts, text) + _said(slack, ts, RESTARTED) >= 1
                    for ts, text in threads.items()
                )
                return done and not _marked(slack) and left == 0

            try:
                await _until(drained, timeout=180, what="every thread answered, the outbox empty")
            except AssertionError:
                rows = await db.fetch("SELECT method, claimed_by, attempts, last_error FROM outbox")
                shown = {
                    ts: (_finished(slack, ts, t), _said(slack, ts, RESTARTED))
                    for ts, t in threads.items()
                }
                raise AssertionError(f"shown {shown}; 👀 {_marked(slack)}; outbox {rows}") from None
            await bots.stop()
        except BaseException:
            print(bots.log())  # shown by pytest when the test failed
            raise
        finally:
            for replica in bots.replicas:
                if replica.alive:
                    await replica.kill()
            await db.close()
    assert held > 0, "the victim held no outbox rows at the kill"
    cut = 0
    for ts, text in threads.items():
        shown = (_finished(slack, ts, text), _said(slack, ts, RESTARTED))
        assert shown in ((1, 0), (0, 1)), (ts, text, shown)
        cut += shown[1]
    assert COUNT - cut > before, "nothing was answered after the kill: it came after the storm"
    told = [str(c.params.get("text")) for c in slack.calls_to("chat.postMessage") if c.ok]
    assert not any("ratelimited" in t or "slow down" in t for t in told)
    assert max(acks) < 3.0, acks


async def _held(db: asyncpg.Connection, claimed: str, *, live: bool = False) -> int:
    """Outbox rows the replica claimed and has not sent (`live`: under a lease still running;
    after its death its claims stay until a survivor takes the rows over)."""
    query = "SELECT count(*) FROM outbox WHERE claimed_by LIKE $1"
    found = await db.fetchval(query + (" AND claimed_until > now()" if live else ""), claimed)
    return int(found)


async def _until(ready: Callable[[], Awaitable[object]], *, timeout: float, what: str) -> None:
    """Poll `ready` (the database and the stand-in's record, not timing) until it holds."""

    async def poll() -> None:
        while True:
            if await ready():
                return
            await asyncio.sleep(0.1)  # polling another process's work: no event to wait on

    try:
        await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what}") from None


def _finished(slack: SlackAPIStandIn, thread_ts: str, text: str) -> int:
    """Messages of the thread that show `text` as a finished answer (under its feedback
    buttons: a stream cut off by the kill never got them)."""
    return sum(
        1
        for m in slack.messages
        if m.get("thread_ts") == thread_ts
        and text in str(m.get("text"))
        and "opsgate_feedback" in str(m.get("blocks"))
    )


def _said(slack: SlackAPIStandIn, thread_ts: str, text: str) -> int:
    return sum(
        1 for m in slack.messages if m.get("thread_ts") == thread_ts and text in str(m.get("text"))
    )


def _marked(slack: SlackAPIStandIn) -> dict[str, int]:
    """Messages still showing 👀 (added more often than removed)."""
    net: Counter[str] = Counter()
    for call in slack.calls:
        if call.ok and call.method == "reactions.add":
            net[str(call.params.get("timestamp"))] += 1
        elif call.ok and call.method == "reactions.remove":
            net[str(call.params.get("timestamp"))] -= 1
    return {ts: n for ts, n in net.items() if n > 0}
