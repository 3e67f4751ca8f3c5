"""Paused runs cost no memory: `python bench/paused_memory.py` (about 50-75 s, mostly fsyncs).

10,000 runs of `ChatClientAgent` over `SQLiteStore`, each answered by an in-process scripted
model with one call of a tool that needs approval, so each run ends `AwaitingApproval`. What is
left of a paused run is rows in the SQLite file (the session, its messages, the ledger row, the
audit row): the run's coroutine has returned, so the process's RSS after the 10,000 pauses should
be the RSS before them, give or take SQLite's page cache (bounded by `cache_size`, 2 MiB by
default) and allocator noise.

Beside it, the design this avoids: the same 10,000 runs each kept waiting inside its coroutine
(a tool that awaits an in-memory "click" event, with the history in `InMemorySessionStore`),
measured in the same process. Their RSS growth per run is what a paused run would cost if it
were a coroutine. The RSS is also read half-way: growth that is a cache filling up stops, growth
that is per run goes on.

The SQLite figure is limited by fsync: three durable commits per paused run (the session, the
user's message, the pause itself with its ledger and audit rows).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import gc
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable

from _common import Table, db_bytes, machine, rss_bytes

from agent_core import (
    AgentSession,
    ChatClientAgent,
    Finish,
    FinishReason,
    InMemorySessionStore,
    ToolApprovalRequest,
    tool,
)
from bot.store import SQLiteStore
from tests.support.scripted import ScriptedChatClient, Turn, call

RUNS = 10_000
WARMUP = 200
WORKERS = 8
"""Concurrent runs: the store serialises its commits, but Python work overlaps the fsyncs."""


@tool(requires_approval=True)
async def restart(service: str) -> str:
    """Restart a service (needs a human's approval)."""
    return f"restarted {service}"


def _turn() -> Turn:
    return Turn(text="I will restart web.", tool_calls=[call("call_1", "restart", service="web")])


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _settled_rss() -> int:
    gc.collect()
    return rss_bytes()


async def _in_parallel(count: int, work: Callable[[int], Awaitable[None]]) -> None:
    """Run `work(0..count-1)` with WORKERS at a time."""
    queue = iter(range(count))

    async def worker() -> None:
        for i in queue:
            await work(i)

    async with asyncio.TaskGroup() as group:
        for _ in range(WORKERS):
            group.create_task(worker())


async def _pause_in_sqlite(store: SQLiteStore, first: int, count: int) -> None:
    """Pause `count` runs, each in its own thread's session; check each really paused."""
    client = ScriptedChatClient()
    agent = ChatClientAgent(client, tools=[restart], store=store)

    async def one(i: int) -> None:
        session = await store.get_or_create_session("TB", "CB", f"thread-{first + i}")
        client.add(_turn())
        requests = 0
        finish: Finish | None = None
        async for update in agent.run("restart web please", AgentSession(session.id)):
            if isinstance(update, ToolApprovalRequest):
                requests += 1
            elif isinstance(update, Finish):
                finish = update
        if requests != 1 or finish is None:
            raise RuntimeError(f"run {first + i} did not pause: {requests} request(s), {finish!r}")
        if finish.finish_reason is not FinishReason.AWAITING_APPROVAL:
            raise RuntimeError(f"run {first + i} finished {finish.finish_reason!r}, not paused")
        client.requests.clear()  # the script's record of requests is the harness's, not ours

    await _in_parallel(count, one)


async def _hold_as_coroutines(count: int) -> tuple[int, int]:
    """RSS with `count` runs waiting inside their coroutines, and the RSS they started from.

    Each run's tool awaits one shared "click"; once all are parked the RSS is read, then the click
    releases them and every run finishes, so nothing is left running.
    """
    click = asyncio.Event()
    parked = 0
    all_parked = asyncio.Event()

    @tool
    async def restart_when_clicked(service: str) -> str:
        """Restart a service once a human clicks (held in memory)."""
        nonlocal parked
        parked += 1
        if parked == count:
            all_parked.set()
        await click.wait()
        return f"restarted {service}"

    client = ScriptedChatClient()
    for _ in range(count):
        client.add(
            Turn(
                text="I will restart web.",
                tool_calls=[call("call_1", "restart_when_clicked", service="web")],
            )
        )
    agent = ChatClientAgent(client, tools=[restart_when_clicked], store=InMemorySessionStore())

    async def one(i: int) -> None:
        async for update in agent.run("restart web please", AgentSession(f"held-{i}")):
            if isinstance(update, Finish) and update.finish_reason is not FinishReason.STOP:
                raise RuntimeError(f"held run {i} finished {update.finish_reason!r}")

    before = _settled_rss()
    async with asyncio.TaskGroup() as group:
        for i in range(count):
            group.create_task(one(i))
        await asyncio.wait_for(all_parked.wait(), timeout=60)
        client.requests.clear()
        during = _settled_rss()
        client.add(*(Turn(text="Restarted.") for _ in range(count)))
        click.set()
    return before, during


def _counts(db: Path) -> tuple[int, int, int]:
    """Sessions awaiting approval, gated ledger rows pending, messages: read straight off disk."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        awaiting = conn.execute(
            "SELECT COUNT(*) FROM sessions WHERE state = 'awaiting_approval'"
        ).fetchone()[0]
        pending = conn.execute(
            "SELECT COUNT(*) FROM tool_calls WHERE status = 'pending' AND needs_approval = 1"
        ).fetchone()[0]
        messages = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    return int(awaiting), int(pending), int(messages)


async def main() -> None:
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        async with SQLiteStore(db) as store:
            await _pause_in_sqlite(store, 0, WARMUP)  # imports, caches, pydantic, the WAL
            rss_before = _settled_rss()
            started = time.perf_counter()
            half = RUNS // 2
            await _pause_in_sqlite(store, WARMUP, half)
            rss_half = _settled_rss()
            await _pause_in_sqlite(store, WARMUP + half, RUNS - half)
            elapsed = time.perf_counter() - started
            rss_after = _settled_rss()
            tasks = len(asyncio.all_tasks())
        size_after = db_bytes(db)
        awaiting, pending, messages = _counts(db)
    held_before, held_during = await _hold_as_coroutines(RUNS)

    total = WARMUP + RUNS
    print(
        f"{RUNS:,} runs paused in {elapsed:.1f} s ({RUNS / elapsed:,.0f}/s), after {WARMUP} "
        f"warm-up pauses; on disk: {awaiting:,} sessions awaiting approval, {pending:,} calls "
        f"pending, {messages:,} messages; tasks left: {tasks} (this one)"
    )
    table = Table("a paused run is", "RSS before", "RSS after", "growth", "per paused run")
    table.add(
        "rows in SQLite (OpsGate)",
        _mib(rss_before),
        _mib(rss_after),
        _mib(rss_after - rss_before),
        _kib((rss_after - rss_before) / RUNS),
    )
    table.add(
        "a coroutine awaiting a click (contrast)",
        _mib(held_before),
        _mib(held_during),
        _mib(held_during - held_before),
        _kib((held_during - held_before) / RUNS),
    )
    table.print()
    print(
        f"RSS growth over the first {half:,} pauses: {_mib(rss_half - rss_before)}, over the "
        f"last {RUNS - half:,}: {_mib(rss_after - rss_half)}"
    )
    print(
        f"SQLite file after closing (WAL checkpointed): {_mib(size_after)} for {total:,} paused "
        f"runs, {_kib(size_after / total)} per paused run"
    )
    if awaiting != total or pending != total:
        raise SystemExit(f"expected {total:,} paused sessions on disk, found {awaiting:,}")


if __name__ == "__main__":
    asyncio.run(main())
