"""What the audit chain and tracing cost a decision through the bot: `python bench/decisions.py`
(about 16 minutes on a 2-CPU VM).

`audit_chain.py` measures the chain and the traces on the bare store; this is what a team sees.
Each round is `click_ack.py`'s burst: 200 runs paused on a gated call (200 pending cards), then
one signed `block_actions` Approve click on each card from 50 concurrent clients (this process;
the bots run in processes of their own). Every click goes HTTP -> Bolt -> intake -> the decision
(store) -> the card redrawn (outbox) -> the resumed run -> the tool -> the model's answer,
streamed into the thread. The round's clock runs from the first click until every click is
answered, every decision recorded and every resumed run has answered (and its messages left the
outbox); traced, until all the round's spans are exported too (`force_flush`).

Three sides, each the real bot in HTTP mode (`running_bot`: the Slack Web API and LLM
stand-ins, an SQLite file) in a process of its own, with the same rows when its rounds run:
- the floor: the store with `chained=False` (its chain trigger dropped, as in
  `audit_chain.py`), tracing off;
- the chain: the bot as shipped, tracing off;
- chain + traces: as shipped, tracing on as `opsgate run` turns it on (`configure_tracing`
  with `OTEL_EXPORTER_OTLP_ENDPOINT` set), exporting over OTLP/HTTP to a local receiver
  (another process) that counts the spans it got by name.
Rounds rotate which side goes first; each round's ratio is the floor's time over the side's
time for the same burst; printed per round and as the median. The goal: at most 1.10x.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import gc
import json
import multiprocessing
import os
import statistics
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from _common import Checks, Table, machine, ms, p50
from click_ack import CLIENTS, _clicks, _fire, _Setup, restart

from bot.store import SQLiteStore, Store

CLICKS = 200
"""Pending cards, and so clicks and decisions, per round and side."""
ROUNDS = 9
WARMUP_CARDS = 50
SIDES = ("floor", "chain", "traced")
LABELS = {
    "floor": "floor: no chain, no traces",
    "chain": "chain",
    "traced": "chain + traces (OTLP)",
}

_RECEIVER = textwrap.dedent(
    """
    import collections, gzip, json, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    bodies = []
    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            bodies.append(body)
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
    names = collections.Counter()
    for body in bodies:  # decoded at the end: the bench measures the bot, not the receiver
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                names.update(span.name.split(" ")[0] for span in scope.spans)
    print(json.dumps({"bytes": sum(map(len, bodies)), "spans": names}), flush=True)
    """
)
"""The collector stand-in: keeps each request's (decompressed) body, and at the end prints the
bytes and the spans by operation (`invoke_agent`, `chat`, `execute_tool`, `approval`)."""


class _FloorStore(SQLiteStore):
    """The floor's store: appends without the chain, and the trigger that would refuse such
    rows dropped (the bot opens it through `bot.wiring.open_store`)."""

    async def __aenter__(self) -> _FloorStore:
        await super().__aenter__()
        await self._connection().execute("DROP TRIGGER audit_chain_advance")
        return self


def _open_floor_store(target: Any, *, exclusive: bool = False, **kw: Any) -> Store:
    return _FloorStore(target, exclusive=exclusive, chained=False, **kw)


async def _audit_counts(store: Any) -> tuple[int, int]:
    """The decision rows in the audit log, and the rows without the chain's hash, counted in
    SQL (the floor's unchained rows have no seq or hash, which `audit_rows()` would refuse)."""
    sql = (
        "SELECT count(*) FILTER (WHERE event = 'decision'), count(*) FILTER (WHERE hash IS NULL)"
        " FROM audit"
    )
    async with store._connection().execute(sql) as cursor:
        decisions, unchained = await cursor.fetchone()
    return int(decisions), int(unchained)


# -- a side: one bot in a process of its own, driven over a pipe ------------------------------


async def _serve_side(side: str, conn: Connection, endpoint: str | None) -> None:
    from bot.observability.tracing import configure_tracing
    from tests.support.harness import running_bot

    flush: Callable[[], object] = lambda: None  # noqa: E731
    tracing = None
    if endpoint is not None:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        tracing = configure_tracing()
        if tracing is None:
            raise RuntimeError(f"side {side!r}: configure_tracing() turned no tracing on")
        flush = tracing.provider.force_flush
    if side == "floor":
        from bot import wiring

        wiring.open_store = _open_floor_store  # type: ignore[attr-defined]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with running_bot(Path(tmp), tools=[restart]) as bot:
                setup = _Setup(bot)
                url = f"{bot.url}/slack/events"
                round_cards: list[str] = []
                cpu = 0.0
                conn.send("ready")
                while (command := await asyncio.to_thread(conn.recv)) != "stop":
                    if command == "cards":  # set up a round: its pending cards, its clicks
                        cards = await setup.pending_cards(conn.recv())
                        round_cards = [c.ledger_id for c in cards]
                        for n in range(len(cards)):
                            bot.llm.reply_text(f"Restarted, answer {n}.")
                        await asyncio.to_thread(flush)  # setup's spans out before the clock
                        _settled_heap()
                        conn.send((url, _clicks(cards)))
                        cpu = time.process_time()
                    elif command == "finish":  # the clicks are answered: the rest of the work
                        await bot.settle(timeout=120)
                        await asyncio.to_thread(flush)
                        conn.send(("finished", time.process_time() - cpu))
                    elif command == "verify":  # off the clock
                        calls = [await bot.deps.store.get_call(i) for i in round_cards]
                        done = sum(1 for row in calls if row is not None and row.status == "done")
                        counts = await _audit_counts(bot.deps.store)
                        conn.send((done, *counts, bot.llm.unexpected == [], bot.llm.queued))
                    else:
                        raise RuntimeError(f"side {side!r}: unknown command {command!r}")
    finally:
        if tracing is not None:
            tracing.shutdown()
    conn.send("stopped")


def _settled_heap() -> None:
    """Before a round's clock: what is alive now (the rounds before, the stand-ins' records of
    every call) is never scanned by the collector again. Else a full collection of that heap,
    which grows with each round and is no part of a decision, lands in one side's round and
    not the other's. The garbage a round makes, spans included, is still collected."""
    gc.collect()
    gc.freeze()


def _side_main(side: str, conn: Connection, endpoint: str | None) -> None:
    asyncio.run(_serve_side(side, conn, endpoint))


# -- the coordinator (and clients) ------------------------------------------------------------


@dataclass
class _Side:
    name: str
    conn: Connection
    seconds: list[float] = field(default_factory=list)
    """Each recorded round's time, first click to the last of its work."""
    cpu: list[float] = field(default_factory=list)
    """Each recorded round's CPU seconds in the side's process (all its threads)."""
    acks: list[float] = field(default_factory=list)
    """Seconds to the HTTP 200 of each recorded click."""
    statuses: list[int] = field(default_factory=list)
    done: int = 0
    decisions: int = 0
    unchained: int = 0
    """Audit rows without the chain's hash (all of the floor's, none of the others')."""
    cards: int = 0

    def ask(self, *message: object) -> Any:
        for part in message:
            self.conn.send(part)
        return self.conn.recv()

    def round(self, cards: int, checks: Checks, *, record: bool) -> None:
        url, requests = self.ask("cards", cards)
        self.cards += cards
        started = time.perf_counter()
        results = _fire(url, requests, CLIENTS)
        finished, cpu = self.ask("finish")
        elapsed = time.perf_counter() - started
        if finished != "finished":
            raise RuntimeError(f"side {self.name!r} did not finish its round")
        done, self.decisions, self.unchained, no_unexpected, queued = self.ask("verify")
        self.done += done
        if record:
            self.seconds.append(elapsed)
            self.cpu.append(cpu)
            self.acks += [seconds for _, seconds in results]
            self.statuses += [status for status, _ in results]
        if done != cards or not no_unexpected or queued:
            checks.check(False, f"{self.name}: round of {cards}: {done} done, queued {queued}")


def _rounds(sides: list[_Side], checks: Checks) -> None:
    for side in sides:
        side.round(WARMUP_CARDS, checks, record=False)
    for n in range(ROUNDS):  # the order rotates, so no side always goes first
        for side in sides[n % 3 :] + sides[: n % 3]:
            side.round(CLICKS, checks, record=True)


def _report(sides: list[_Side], spans: dict[str, int], received: int, checks: Checks) -> None:
    print(
        f"{ROUNDS} rotating rounds x {CLICKS} signed Approve clicks per side, each on its own "
        f"pending card, from {CLIENTS} concurrent clients (another process): decision, card "
        "redraw, resumed run, tool, answer"
    )
    floor = sides[0]
    table = Table("side", "decisions/s", "CPU each", "click ack p50", "rounds (decisions/s)")
    for side in sides:
        rates = [CLICKS / s for s in side.seconds]
        each = ", ".join(f"{r:,.0f}" for r in rates)
        cpu = ms(statistics.median(side.cpu) / CLICKS)
        rate = f"{statistics.median(rates):,.1f}"
        table.add(LABELS[side.name], rate, cpu, ms(p50(side.acks)), each)
    table.print()
    medians = []
    for side in sides[1:]:
        times = [s / f for f, s in zip(floor.seconds, side.seconds, strict=True)]
        cpus = [s / f for f, s in zip(floor.cpu, side.cpu, strict=True)]
        medians.append(statistics.median(times))
        each = ", ".join(f"{t:.2f}" for t in times)
        print(
            f"{LABELS[side.name]:22} {medians[-1]:.3f}x the floor's time per round, "
            f"{statistics.median(cpus):.3f}x its CPU (medians of paired rounds; times: {each})"
        )
    verdict = ", ".join(
        f"{LABELS[s.name]} {'met' if m <= 1.10 else 'NOT met'}"
        for s, m in zip(sides[1:], medians, strict=True)
    )
    print(f"goal: <= 1.10x: {verdict}")
    by_name = ", ".join(f"{name} {count:,}" for name, count in sorted(spans.items()))
    print(f"spans received by the local OTLP receiver: {sum(spans.values()):,} ({by_name})")
    print(f"{received:,} bytes of spans received")
    for side in sides:
        checks.check(
            side.done == side.cards == side.decisions,
            f"{side.name}: all {side.cards} cards approved once, their calls ran, "
            f"{side.decisions} decisions recorded",
        )
        unchained = side.unchained >= side.decisions if side.name == "floor" else not side.unchained
        checks.check(unchained, f"{side.name}: {side.unchained} audit rows without the chain")
        checks.check(
            all(s == 200 for s in side.statuses),
            f"{side.name}: all {len(side.statuses)} clicks answered 200",
        )
    for kind in ("approval", "chat", "execute_tool", "invoke_agent"):
        checks.check(spans.get(kind, 0) > 0, f"the traced side exported {kind} spans")


def main() -> None:
    print(machine(), flush=True)
    checks = Checks()
    receiver = subprocess.Popen(
        [sys.executable, "-c", _RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert receiver.stdout is not None and receiver.stdin is not None
    endpoint = f"http://127.0.0.1:{int(receiver.stdout.readline())}"
    spawn = multiprocessing.get_context("spawn")
    sides: list[_Side] = []
    processes = []
    stopped = False
    try:
        for name in SIDES:
            ours, theirs = spawn.Pipe()
            traced = endpoint if name == "traced" else None
            process = spawn.Process(target=_side_main, args=(name, theirs, traced), name=name)
            process.start()
            processes.append(process)
            sides.append(_Side(name, ours))
        for side in sides:
            if side.conn.recv() != "ready":
                raise RuntimeError(f"side {side.name!r} did not start")
        _rounds(sides, checks)
        for side in sides:
            if side.ask("stop") != "stopped":
                raise RuntimeError(f"side {side.name!r} did not stop")
        stopped = True
    finally:
        for process in processes:  # after a failure, the other sides still wait for commands
            process.join(timeout=60 if stopped else 1)
            if process.is_alive():
                process.terminate()
                process.join()
        receiver.stdin.close()
        received = json.loads(receiver.stdout.read().strip() or '{"bytes": 0, "spans": {}}')
        receiver.wait(timeout=30)
    _report(sides, received["spans"], received["bytes"], checks)
    checks.exit_on_failure()


if __name__ == "__main__":
    main()
