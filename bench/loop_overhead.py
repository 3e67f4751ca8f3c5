"""Agent loop overhead: `python bench/loop_overhead.py` (about 30-45 s).

One run is 5 tool rounds (trivial tools, async and sync in turn: a sync tool pays the hop to a
worker thread; arguments streamed in 4-character fragments like the real OpenAI capture) and a
final text answer: 6 streamed requests to `LLMStandIn`, a loopback OpenAI-compatible server that
answers at once. Its wall time is set beside the floor: the very same 6 request bodies sent with
plain httpx, each SSE body read line by line and every `data:` line parsed with `json.loads`.
The two alternate, many times, over one connection pool. The ratio is the median, over the
runs, of each run over the floor measured right beside it (goal: <= 1.2): on a shared machine
the load drifts from second to second, and a pair shares it. A second floor, measured after
each pair, reads the same bodies through httpx-sse (the SSE parser the client uses; httpx's
`aiter_lines` also splits on Unicode line separators, which SSE does not): the ratio over it is
the loop's own share, without the parser's.

The stand-in runs in the same process and event loop, so its serving time is inside both figures;
the difference per request is the loop's own cost (pydantic messages, the chunk assembler, tool
argument validation, the journal). A second row adds the durable store (`SQLiteStore`,
`synchronous = FULL`), which is what a real run pays: an fsync per step. The TCP connections each
side opens are counted too (by the local port of each response's socket): a client that closes a
stream before reading it to its end cannot give the connection back to the pool, and against a
real provider every new connection is a TCP and TLS handshake.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import httpx
from _common import Table, machine, ms
from httpx_sse import aconnect_sse

from agent_core import (
    AgentSession,
    ChatClientAgent,
    Finish,
    FinishReason,
    InMemorySessionStore,
    OpenAIChatClient,
    SessionStore,
    ToolResult,
    tool,
)
from bot.store import SQLiteStore
from tests.support.llm_server import LLMStandIn

ROUNDS = 5
REPEATS = 200
DURABLE_REPEATS = 40
WARMUP = 20


class _Connections:
    """Counts the TCP connections an `httpx.AsyncClient` opens, from its responses' sockets."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, int]] = set()
        self.opened = 0

    async def on_response(self, response: httpx.Response) -> None:
        stream = response.extensions.get("network_stream")
        address = stream.get_extra_info("client_addr") if stream is not None else None
        if address is not None and tuple(address) not in self.seen:
            self.seen.add(tuple(address))
            self.opened += 1


@tool
async def bump(n: int, note: str) -> str:
    """Add one to n."""
    return str(n + 1)


@tool
def bump_sync(n: int, note: str) -> str:
    """Add one to n, in a plain function (the loop runs it on a worker thread)."""
    return str(n + 1)


FRAGMENT = 4
"""Characters per streamed argument fragment: what the real OpenAI capture in
tests/fixtures/openai-sse/ sends."""
NOTE = "checking the web tier after the deploy of build 4812"


def _queue_run(llm: LLMStandIn, run: int) -> None:
    """The replies of one run: ROUNDS tool-call turns (async and sync tools in turn, arguments
    streamed in 4-character fragments), then the answer."""
    for r in range(ROUNDS):
        name = "bump" if r % 2 == 0 else "bump_sync"
        arguments = {"n": r, "note": NOTE}
        llm.reply_tool_calls([(f"call_{run}_{r}", name, arguments)], fragment=FRAGMENT)
    llm.reply_text("All five bumps are done; the last one gave 5.")


async def _agent_run(
    agent: ChatClientAgent, llm: LLMStandIn, session_id: str, run: int
) -> tuple[float, list[dict[str, Any]]]:
    """Seconds for one whole run, and the request bodies it sent."""
    _queue_run(llm, run)
    first = len(llm.requests)
    results = 0
    finish: Finish | None = None
    started = time.perf_counter()
    async for update in agent.run("Bump five times, please.", AgentSession(session_id)):
        if isinstance(update, ToolResult):
            results += 1
        elif isinstance(update, Finish):
            finish = update
    elapsed = time.perf_counter() - started
    if finish is None or finish.finish_reason is not FinishReason.STOP or results != ROUNDS:
        raise RuntimeError(f"run {run} did not do {ROUNDS} tool rounds: {finish!r}, {results}")
    return elapsed, llm.requests[first:]


async def _sse_floor_run(
    http: httpx.AsyncClient, llm: LLMStandIn, bodies: list[dict[str, Any]], run: int
) -> float:
    """Seconds to send the same bodies with httpx and parse every SSE event with httpx-sse."""
    _queue_run(llm, run)
    url = llm.base_url + "/chat/completions"
    chunks = 0
    started = time.perf_counter()
    for body in bodies:
        async with aconnect_sse(http, "POST", url, json=body) as source:
            source.response.raise_for_status()
            async for event in source.aiter_sse():
                if event.data != "[DONE]":
                    json.loads(event.data)
                    chunks += 1
    elapsed = time.perf_counter() - started
    if chunks == 0:
        raise RuntimeError(f"SSE floor run {run} parsed no chunks")
    return elapsed


async def _floor_run(
    http: httpx.AsyncClient, llm: LLMStandIn, bodies: list[dict[str, Any]], run: int
) -> float:
    """Seconds to send the same bodies with plain httpx and parse every SSE data line."""
    _queue_run(llm, run)
    url = llm.base_url + "/chat/completions"
    chunks = 0
    started = time.perf_counter()
    for body in bodies:
        async with http.stream("POST", url, json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    json.loads(line[6:])
                    chunks += 1
    elapsed = time.perf_counter() - started
    if chunks == 0:
        raise RuntimeError(f"floor run {run} parsed no chunks")
    return elapsed


def _agent(http: httpx.AsyncClient, llm: LLMStandIn, store: SessionStore) -> ChatClientAgent:
    client = OpenAIChatClient(http, model="bench-model", base_url=llm.base_url, max_retries=0)
    return ChatClientAgent(client, tools=[bump, bump_sync], store=store, max_rounds=ROUNDS + 1)


@dataclass(frozen=True)
class _Result:
    run: float
    floor: float
    ratio: float
    """Median over the runs of run / floor, each run against the floor measured beside it."""
    sse_ratio: float
    """The same against the httpx-sse floor."""
    run_connections: float
    floor_connections: float
    """New TCP connections per run, on average."""


async def _compare(
    agent: ChatClientAgent,
    http: httpx.AsyncClient,
    llm: LLMStandIn,
    session_ids: list[str],
    connections: _Connections,
) -> _Result:
    """Median seconds of the agent run and of its floor, over all but the warm-up sessions.

    Which of the two goes first alternates; going second, the floor replays the bodies the run
    just sent, going first those of the run before (the same but for a few digits of call ids).
    """
    runs: list[float] = []
    floors: list[float] = []
    sse_floors: list[float] = []
    run_connections = floor_connections = 0
    bodies: list[dict[str, Any]] = []
    for i, session_id in enumerate(session_ids):
        floor_first = bool(i % 2 and bodies)
        if floor_first:
            before = connections.opened
            floor = await _floor_run(http, llm, bodies, 2 * i)
            floor_opened = connections.opened - before
        before = connections.opened
        elapsed, bodies = await _agent_run(agent, llm, session_id, 2 * i + 1)
        run_opened = connections.opened - before
        if not floor_first:
            before = connections.opened
            floor = await _floor_run(http, llm, bodies, 2 * i)
            floor_opened = connections.opened - before
        sse_floor = await _sse_floor_run(http, llm, bodies, 2 * i)
        if i >= WARMUP:
            runs.append(elapsed)
            floors.append(floor)
            sse_floors.append(sse_floor)
            run_connections += run_opened
            floor_connections += floor_opened
    return _Result(
        statistics.median(runs),
        statistics.median(floors),
        statistics.median(run / floor for run, floor in zip(runs, floors, strict=True)),
        statistics.median(run / floor for run, floor in zip(runs, sse_floors, strict=True)),
        run_connections / len(runs),
        floor_connections / len(floors),
    )


async def main() -> None:
    print(machine())
    requests = ROUNDS + 1
    connections = _Connections()
    hooks = {"response": [connections.on_response]}
    async with LLMStandIn() as llm, httpx.AsyncClient(timeout=30, event_hooks=hooks) as http:
        memory = _agent(http, llm, InMemorySessionStore())
        ids = [f"memory-{i}" for i in range(WARMUP + REPEATS)]
        in_memory = await _compare(memory, http, llm, ids, connections)
        with tempfile.TemporaryDirectory() as tmp:
            async with SQLiteStore(Path(tmp) / "bench.db") as store:
                ids = [
                    (await store.get_or_create_session("TB", "CB", f"durable-{i}")).id
                    for i in range(WARMUP + DURABLE_REPEATS)
                ]
                durable = _agent(http, llm, store)
                durable_result = await _compare(durable, http, llm, ids, connections)
        if llm.unexpected:
            raise RuntimeError(f"{len(llm.unexpected)} request(s) found no reply queued")

    print(
        f"one run = {ROUNDS} tool rounds + the answer = {requests} streamed requests; "
        f"medians of {REPEATS} runs ({DURABLE_REPEATS} with SQLite), after {WARMUP} warm-up runs"
    )
    table = Table(
        "",
        "run (median)",
        "floor: httpx + json.loads",
        "ratio",
        "ratio over httpx-sse",
        "extra per request",
        "TCP conns opened/run (run / floor)",
    )
    for label, result in (
        ("agent loop, InMemorySessionStore", in_memory),
        ("agent loop, SQLiteStore (fsync per step)", durable_result),
    ):
        table.add(
            label,
            ms(result.run),
            ms(result.floor),
            f"{result.ratio:.2f}x",
            f"{result.sse_ratio:.2f}x",
            ms((result.run - result.floor) / requests),
            f"{result.run_connections:.1f} / {result.floor_connections:.1f}",
        )
    table.print()
    verdict = "met" if in_memory.ratio <= 1.2 else "NOT met"
    print(f"goal: in-memory ratio <= 1.2: {verdict}")


if __name__ == "__main__":
    asyncio.run(main())
