"""What the audit chain and tracing cost a decision: `python bench/audit_chain.py` (~2-4 min;
`python bench/audit_chain.py sqlite` or `postgresql` for one database).

Decisions recorded per second, 50 concurrent writers on one store (as `store.py`), on SQLite and
(when the server binaries are installed) on PostgreSQL, in rounds that rotate between
- the floor: the same store with `chained=False` (the audit append as before the chain: one
  INSERT, no seq, no hash; its database's chain trigger dropped, which would refuse such rows),
  no traces;
- the chain: the store as shipped;
- chain + traces: the same (on a database of its own, as each side has, so all three hold the
  same rows), and for every decision its `approval {tool}` span (in a paused
  run's trace, as the bot writes it) exported by the SDK's batch processor over OTLP/HTTP to a
  local receiver (another process, as a collector is, that reads each request's body); the
  round ends once all its spans are exported.
Each round's ratio is the floor's rate over the side's (the time per decision), so a noisy
neighbour moves both; printed per round and as the median. Beside it, the CPU this process
spent per decision (all its threads: more stable than the clock on a shared machine, but blind
to PostgreSQL's server processes). The goal: at most 1.10x.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.store import DECISIONS_PER_WRITER, WRITERS, _gated_calls
from bot.observability.tracing import approval_span, configure_tracing
from bot.store import SQLiteStore
from tests.support.postgres import PostgresCluster, find_bin_dir

ROUNDS = 12
PARENT = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
"""The paused run's stored trace and span ids the approval spans join."""

_RECEIVER = textwrap.dedent(
    """
    import sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    total = 0
    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            global total
            total += len(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(server.server_port, flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    print(total, flush=True)
    """
)

Store = Any  # SQLiteStore or PostgresStore: the bench uses only what both have
Opener = Callable[[str, bool], AbstractAsyncContextManager[Store]]
"""A store of its own for one side (its name), chained or not."""


@dataclass(frozen=True, slots=True)
class Round:
    rate: float
    """Decisions per second (wall clock)."""
    cpu: float
    """Seconds of this process's CPU (all its threads) per decision."""


async def _round(store: Store, label: str, flush: Callable[[], object] | None) -> Round:
    """One round of decisions; `flush`: traced, and the round ends once its spans are sent."""
    batches = await _gated_calls(store, label)
    asked = datetime.now(UTC)

    async def writer(w: int) -> int:
        recorded = 0
        for ledger_id in batches[w]:
            outcome = await store.decide(ledger_id, "approved", user_id=f"U{w}")
            recorded += outcome.recorded
            if flush is not None:
                approval_span(
                    "restart",
                    parent=PARENT,
                    asked_at=asked,
                    decided_at=datetime.now(UTC),
                    decision="approved",
                    approvers=(f"U{w}",),
                    required=1,
                    rule="always",
                )
        return recorded

    loop = asyncio.get_running_loop()
    started, cpu = loop.time(), time.process_time()
    counts = await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    if flush is not None:
        await asyncio.sleep(0)  # the spans written just after the last decisions' steps
        await asyncio.to_thread(flush)
    elapsed, cpu = loop.time() - started, time.process_time() - cpu
    assert sum(counts) == WRITERS * DECISIONS_PER_WRITER, counts
    return Round(sum(counts) / elapsed, cpu / sum(counts))


async def _measure(name: str, open_store: Opener, flush: Callable[[], object]) -> None:
    floor: list[Round] = []
    chain: list[Round] = []
    ours: list[Round] = []
    # A database per side: each one holds the same rows when its rounds run (a store shared by
    # two sides would be twice the size of the floor's, slower for that alone).
    async with (
        open_store("floor", False) as plain,
        open_store("chain", True) as chained,
        open_store("traced", True) as tracing,
    ):
        for n in range(ROUNDS):  # the order rotates, so no side always runs first
            sides = [(floor, plain, None), (chain, chained, None), (ours, tracing, flush)]
            for figures, store, traced in sides[n % 3 :] + sides[: n % 3]:
                figures.append(await _round(store, f"{len(figures)}-{traced is None}", traced))
        seq, _ = await chained.audit_chain_head()
    print(f"{name}: {WRITERS} writers on one store, {ROUNDS} rounds", flush=True)
    for label, figures in (
        ("floor: no chain, no traces", floor),
        ("chain", chain),
        ("chain + traces (OTLP)", ours),
    ):
        rates = ", ".join(f"{r.rate:,.0f}" for r in figures)
        rate, cpu = (
            statistics.median(r.rate for r in figures),
            statistics.median(r.cpu for r in figures),
        )
        print(f"  {label:27} {rate:6,.0f} decisions/s, {cpu * 1e6:4.0f} us CPU each  ({rates})")
    for label, figures in (("chain", chain), ("chain + traces", ours)):
        times = [f.rate / r.rate for f, r in zip(floor, figures, strict=True)]
        cpus = [r.cpu / f.cpu for f, r in zip(floor, figures, strict=True)]
        each = ", ".join(f"{t:.2f}" for t in times)
        print(
            f"  {label:15} {statistics.median(times):.3f}x the floor's time per decision, "
            f"{statistics.median(cpus):.3f}x its CPU (medians of paired rounds; times: {each})"
        )
    print(f"  goal: <= 1.10x; chain head at seq {seq}", flush=True)


def _sqlite(tmp: Path) -> Opener:
    @asynccontextmanager
    async def opened(name: str, chained: bool) -> AsyncIterator[Store]:
        path = tmp / f"{name}.db"
        async with SQLiteStore(path, chained=chained) as store:
            if not chained:
                await store._connection().execute("DROP TRIGGER audit_chain_advance")
            yield store

    return opened


def _postgres(cluster: PostgresCluster) -> Opener:
    import asyncpg

    from bot.store import PostgresStore

    @asynccontextmanager
    async def opened(name: str, chained: bool) -> AsyncIterator[Store]:
        url = await cluster.create_database()
        async with PostgresStore(url, chained=chained) as store:
            if not chained:
                conn = await asyncpg.connect(url)
                await conn.execute(
                    "DROP TRIGGER audit_chain_advance ON audit; ALTER TABLE audit "
                    "ALTER COLUMN seq DROP NOT NULL, ALTER COLUMN prev_hash DROP NOT NULL, "
                    "ALTER COLUMN hash DROP NOT NULL"
                )
                await conn.close()
            yield store

    return opened


async def main(port: int) -> None:
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    setup = configure_tracing()
    assert setup is not None
    wanted = sys.argv[1:] or ["sqlite", "postgresql"]
    try:
        if "sqlite" in wanted:
            with tempfile.TemporaryDirectory() as tmp:
                await _measure("SQLite", _sqlite(Path(tmp)), setup.provider.force_flush)
        if "postgresql" in wanted and (bin_dir := find_bin_dir()) is None:
            print("PostgreSQL server binaries not installed: only the SQLite figures")
        elif "postgresql" in wanted and bin_dir is not None:
            with PostgresCluster(bin_dir) as cluster:
                name = "PostgreSQL (the test cluster: fsync off)"
                await _measure(name, _postgres(cluster), setup.provider.force_flush)
    finally:
        setup.shutdown()


def run() -> None:
    receiver = subprocess.Popen(
        [sys.executable, "-c", _RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert receiver.stdout is not None and receiver.stdin is not None
    try:
        asyncio.run(main(int(receiver.stdout.readline())))
    finally:
        receiver.stdin.close()
        received = receiver.stdout.read().strip()
        receiver.wait(timeout=10)
    print(f"{int(received or 0):,} bytes of spans received by the local OTLP receiver")


if __name__ == "__main__":
    run()
