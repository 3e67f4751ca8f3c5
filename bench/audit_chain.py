"""What the audit chain and tracing cost a decision: `python bench/audit_chain.py` (~30-60 s).

Decisions recorded per second, 50 concurrent writers on one SQLite store (as `store.py`), in
rounds that alternate between
- the floor: the store with the pre-chain audit append (one INSERT, no seq, no hash), no traces;
- OpsGate: the chained append (chain head locked and advanced, the row hashed) and, for every
  decision, its `approval {tool}` span exported by the SDK's batch processor over OTLP/HTTP to
  a local receiver (a real HTTP server in this process that reads each request's body).
Medians of the rounds, so a noisy neighbour moves both sides. The goal: at most 10% slower.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.store import DECISIONS_PER_WRITER, WRITERS, _gated_calls
from bot.observability.tracing import approval_span, configure_tracing
from bot.store import SQLiteStore
from bot.store.db import Tx

ROUNDS = 9


class UnchainedStore(SQLiteStore):
    """The floor: the audit append as it was before the chain."""

    async def _write_audit(
        self,
        tx: Tx,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        await tx.execute(
            "INSERT INTO audit (at, event, actor, session_id, call_id, details) "
            "VALUES (:at, :event, :actor, :session_id, :call_id, :details)",
            {
                "at": self._now(),
                "event": event,
                "actor": actor,
                "session_id": session_id,
                "call_id": call_id,
                "details": self._db.json_in(dict(details or {})),
            },
        )


class _Receiver(BaseHTTPRequestHandler):
    spans_bytes = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        _Receiver.spans_bytes += len(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


async def _round(store: SQLiteStore, label: str, *, traced: bool) -> float:
    batches = await _gated_calls(store, label)
    asked = datetime.now(UTC)

    async def writer(w: int) -> int:
        recorded = 0
        for ledger_id in batches[w]:
            outcome = await store.decide(ledger_id, "approved", user_id=f"U{w}")
            recorded += outcome.recorded
            if traced:
                approval_span(
                    "restart",
                    parent=None,
                    asked_at=asked,
                    decided_at=datetime.now(UTC),
                    decision="approved",
                    approvers=(f"U{w}",),
                    required=1,
                    rule="always",
                )
        return recorded

    started = time.perf_counter()
    counts = await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    elapsed = time.perf_counter() - started
    assert sum(counts) == WRITERS * DECISIONS_PER_WRITER, counts
    return sum(counts) / elapsed


async def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{server.server_port}"
    setup = configure_tracing()
    assert setup is not None
    floor: list[float] = []
    chain: list[float] = []
    ours: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            UnchainedStore(Path(tmp) / "floor.db") as plain,
            SQLiteStore(Path(tmp) / "chained.db") as chained,
        ):
            # The floor has no chain: its head's trigger goes (it would refuse unchained rows).
            await plain._connection().execute("DROP TRIGGER audit_chain_advance")
            for n in range(ROUNDS):  # the order rotates, so no side always runs first
                sides = [
                    (floor, plain, False),
                    (chain, chained, False),
                    (ours, chained, True),
                ]
                for figures, store, traced in sides[n % 3 :] + sides[: n % 3]:
                    figures.append(await _round(store, f"{len(figures)}-{traced}", traced=traced))
            head = await chained.audit_chain_head()
    setup.shutdown()
    server.shutdown()
    print(f"decisions/s, {WRITERS} writers, one SQLite store, {ROUNDS} rounds (median):")
    for name, figures in (
        ("without chain or traces", floor),
        ("chain, no traces", chain),
        ("chain + traces (OTLP)", ours),
    ):
        rounds = ", ".join(f"{x:,.0f}" for x in figures)
        print(f"  {name:24} {statistics.median(figures):7,.0f}/s  (rounds: {rounds})")
    for name, figures in (("chain", chain), ("chain + traces", ours)):
        paired = statistics.median(a / b for a, b in zip(floor, figures, strict=True))
        print(f"  {name}: {paired:.3f}x the time per decision (median of paired rounds)")
    print("  goal: <= 1.10x")
    print(f"  chain head at seq {head[0]}; {_Receiver.spans_bytes:,} bytes of spans received")


if __name__ == "__main__":
    asyncio.run(main())
