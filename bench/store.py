"""Benchmark of the SQLite store: `python bench/store.py` (about 10-30 s; prints the figures).

- the median time to append a turn to a session of 10 messages and of 10,000 (the ratio should be
  close to 1: appending writes only the new rows);
- the time to load a 1,000-message session;
- decisions recorded per second with 50 concurrent writers, on one store and on 50 stores (50
  connections, as separate processes would be) sharing the file.

Every commit is durable (`synchronous = FULL`), so the figures include an fsync per commit.
"""

from __future__ import annotations

import asyncio
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable
from contextlib import AsyncExitStack
from pathlib import Path

from agent_core import ChatMessage, ToolApprovalRequest, ToolCall, call_digest
from bot.store import SQLiteStore

SAMPLES = 200
WRITERS = 50
DECISIONS_PER_WRITER = 20


def _turn(n: int) -> list[ChatMessage]:
    return [ChatMessage.user(f"question {n}"), ChatMessage.assistant(f"answer {n} " + "x" * 200)]


async def _seed(store: SQLiteStore, thread: str, messages: int) -> str:
    session = await store.get_or_create_session("TB", "CB", thread)
    for start in range(0, messages, 1000):
        chunk = min(1000, messages - start)
        await store.append_messages(
            session.id, [ChatMessage.user(f"old {start + i}") for i in range(chunk)]
        )
    return session.id


async def _timed(pending: Awaitable[object]) -> float:
    """Seconds to run a (not yet started) coroutine."""
    started = time.perf_counter()
    await pending
    return time.perf_counter() - started


async def bench_append(store: SQLiteStore) -> tuple[float, float]:
    """Median seconds per turn appended to sessions of 10 and of 10,000 messages (interleaved)."""
    small = [await _seed(store, f"small-{i}", 10) for i in range(SAMPLES)]
    large = await _seed(store, "large", 10_000)
    small_times: list[float] = []
    large_times: list[float] = []
    for i, session_id in enumerate(small):
        turn = _turn(i)
        small_times.append(await _timed(store.append_messages(session_id, turn)))
        large_times.append(await _timed(store.append_messages(large, turn)))
    return statistics.median(small_times), statistics.median(large_times)


async def bench_load(store: SQLiteStore) -> float:
    """Median seconds to load a 1,000-message session."""
    session_id = await _seed(store, "load", 1000)
    assert len(await store.load_messages(session_id)) == 1000
    times = [await _timed(store.load_messages(session_id)) for _ in range(20)]
    return statistics.median(times)


async def _gated_calls(store: SQLiteStore, label: str) -> list[list[str]]:
    """One paused batch per writer, each of DECISIONS_PER_WRITER gated calls; their ledger ids."""
    batches: list[list[str]] = []
    for w in range(WRITERS):
        session = await store.get_or_create_session("TB", "CB", f"{label}-{w}")
        calls = tuple(
            ToolCall(id=f"call_{i}", name="restart", arguments=f'{{"i": {i}}}')
            for i in range(DECISIONS_PER_WRITER)
        )
        requests = [
            ToolApprovalRequest(c.id, c.name, {"i": i}, "d", call_digest(c.name, {"i": i}))
            for i, c in enumerate(calls)
        ]
        await store.record_pause(session.id, ChatMessage.assistant(None, calls), requests, [])
        batches.append([row.id for row in await store.batch_calls(session.id)])
    return batches


async def bench_decisions(store: SQLiteStore, stores: list[SQLiteStore], label: str) -> float:
    """Decisions recorded per second, WRITERS tasks each deciding its own batch, in parallel."""
    batches = await _gated_calls(store, label)

    async def writer(w: int) -> int:
        target = stores[w % len(stores)]
        recorded = 0
        for ledger_id in batches[w]:
            outcome = await target.decide(ledger_id, "approved", user_id=f"U{w}")
            recorded += outcome.recorded
        return recorded

    started = time.perf_counter()
    counts = await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    elapsed = time.perf_counter() - started
    assert sum(counts) == WRITERS * DECISIONS_PER_WRITER, counts
    return sum(counts) / elapsed


async def main() -> None:
    python = platform.python_version()
    print(f"SQLite {sqlite3.sqlite_version}, Python {python}, {platform.system()}")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        async with SQLiteStore(db) as store:
            small, large = await bench_append(store)
            print(f"append a turn, session of     10 messages: {small * 1e3:7.3f} ms (median)")
            print(f"append a turn, session of 10,000 messages: {large * 1e3:7.3f} ms (median)")
            print(f"ratio 10,000 / 10: {large / small:.2f}")
            load = await bench_load(store)
            print(f"load a 1,000-message session: {load * 1e3:.2f} ms (median)")
            rate = await bench_decisions(store, [store], "one")
            print(f"decisions/s, {WRITERS} concurrent writers on one store: {rate:,.0f}")
            async with AsyncExitStack() as stack:
                many = [await stack.enter_async_context(SQLiteStore(db)) for _ in range(WRITERS)]
                rate = await bench_decisions(store, many, "many")
            print(f"decisions/s, {WRITERS} concurrent writers on {WRITERS} stores: {rate:,.0f}")


if __name__ == "__main__":
    asyncio.run(main())
