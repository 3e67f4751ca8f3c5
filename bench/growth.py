"""Growth: `python bench/growth.py` (about 15-30 s).

The time of one turn (a question, a streamed text answer) in a thread with 10 prior messages and
in one with 1,000, with the real parts: `ChatClientAgent`, `SQLiteStore` (durable commits) and
`OpenAIChatClient` against `LLMStandIn` on loopback. The turn's time is split into

- storage writes: appending the question and the answer (each a commit with an fsync); these
  write only the new rows, so they should cost the same in both threads (ratio close to 1);
  inside a turn, the first write follows the history load (several ms of pure-Python decoding
  on the 1,000-message thread) and a write right after a CPU burst takes longer to get going on
  SQLite's worker thread, so one more append per thread is also timed on its own, after all
  the turns, with nothing before it: that is the SQL itself;
- the history load: what a run loads, from the last compaction point on (`load_context`);
- what is sent to the model: the request body, in bytes (its `Content-Length`).

The agent runs with a context budget of `BUDGET` tokens, so the 1,000-message thread does not
fit: its first turn (untimed, like every thread's first turn here) compacts it, the model's
summary is stored, and from then on a turn loads and sends the summary and the latest turns
only. That is the steady state of a long thread, and what is timed. (With the default 128,000
budget these 1,000 short messages fit whole, and a turn costs what it did before compaction.)

The 10-message thread is the floor of the 1,000-message one; samples alternate between fresh
threads of each size, and medians are compared.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from _common import Table, machine, ms, ratio, timed

from agent_core import (
    AgentSession,
    ChatClientAgent,
    ChatMessage,
    ContextBudget,
    Finish,
    FinishReason,
    OpenAIChatClient,
    StoredContext,
    Summary,
    ToolApprovalRequest,
    ToolCall,
    ToolCallHeld,
)
from bot.store import SQLiteStore
from tests.support.llm_server import LLMStandIn

SMALL = 10
LARGE = 1_000
SAMPLES = 200
WARMUP = 5
BUDGET = 8_000


class _TimedStore:
    """A `SessionStore` that times what it forwards to the real store: reads and writes apart."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.load = 0.0
        self.write = 0.0

    def reset(self) -> None:
        self.load = self.write = 0.0

    async def load_messages(self, session_id: str) -> list[ChatMessage]:
        started = time.perf_counter()
        try:
            return await self.inner.load_messages(session_id)
        finally:
            self.load += time.perf_counter() - started

    async def load_context(self, session_id: str) -> StoredContext:
        started = time.perf_counter()
        try:
            return await self.inner.load_context(session_id)
        finally:
            self.load += time.perf_counter() - started

    async def save_summary(self, session_id: str, summary: Summary) -> bool:
        started = time.perf_counter()
        try:
            return await self.inner.save_summary(session_id, summary)
        finally:
            self.write += time.perf_counter() - started

    async def append_messages(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        started = time.perf_counter()
        try:
            await self.inner.append_messages(session_id, messages)
        finally:
            self.write += time.perf_counter() - started

    async def record_pause(
        self,
        session_id: str,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None:
        started = time.perf_counter()
        try:
            await self.inner.record_pause(session_id, message, requests, held)
        finally:
            self.write += time.perf_counter() - started

    async def start_tool_call(self, session_id: str, call: ToolCall) -> None:
        started = time.perf_counter()
        try:
            await self.inner.start_tool_call(session_id, call)
        finally:
            self.write += time.perf_counter() - started

    async def finish_tool_call(
        self, session_id: str, call: ToolCall, message: ChatMessage, *, is_error: bool
    ) -> None:
        started = time.perf_counter()
        try:
            await self.inner.finish_tool_call(session_id, call, message, is_error=is_error)
        finally:
            self.write += time.perf_counter() - started


@dataclass(frozen=True)
class _Turn:
    wall: float
    load: float
    write: float
    body_bytes: int
    messages_sent: int


def _history(count: int) -> list[ChatMessage]:
    """A plausible thread: questions and answers of a few hundred characters each."""
    out: list[ChatMessage] = []
    for i in range(count):
        if i % 2 == 0:
            out.append(ChatMessage.user(f"question {i}: how is the web tier doing? " + "q" * 60))
        else:
            out.append(ChatMessage.assistant(f"answer {i}: all healthy. " + "a" * 240))
    return out


async def _seed(store: SQLiteStore, label: str, count: int) -> str:
    session = await store.get_or_create_session("TB", "CB", label)
    await store.append_messages(session.id, _history(count))
    return session.id


async def _turn(
    agent: ChatClientAgent, timed: _TimedStore, llm: LLMStandIn, sid: str, *, compacts: bool = False
) -> _Turn:
    if compacts:
        llm.reply_text("Earlier: questions about the web tier; all healthy each time.")
    llm.reply_text("Everything is healthy; nothing to do.")
    timed.reset()
    finish: Finish | None = None
    started = time.perf_counter()
    async for update in agent.run("and now?", AgentSession(sid)):
        if isinstance(update, Finish):
            finish = update
    wall = time.perf_counter() - started
    if finish is None or finish.finish_reason is not FinishReason.STOP:
        raise RuntimeError(f"turn on session {sid!r} did not finish: {finish!r}")
    headers = {k.lower(): v for k, v in llm.headers[-1].items()}
    return _Turn(
        wall,
        timed.load,
        timed.write,
        int(headers["content-length"]),
        len(llm.requests[-1]["messages"]),
    )


async def _appends_alone(
    store: SQLiteStore, threads: Sequence[tuple[str, str]]
) -> tuple[list[float], list[float]]:
    """Seconds of one more append to each thread, nothing else running, alternating sizes."""
    small: list[float] = []
    large: list[float] = []
    message = [ChatMessage.user("thanks")]
    for i, (small_id, large_id) in enumerate(threads):
        order = [(small, small_id), (large, large_id)]
        for into, sid in order if i % 2 else reversed(order):
            into.append(await timed(store.append_messages(sid, message)))
    return small, large


def _median(turns: Sequence[_Turn], field: str) -> float:
    return statistics.median(float(getattr(turn, field)) for turn in turns)


async def main() -> None:
    print(machine())
    small: list[_Turn] = []
    large: list[_Turn] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            SQLiteStore(Path(tmp) / "bench.db") as store,
            LLMStandIn() as llm,
            httpx.AsyncClient(timeout=30) as http,
        ):
            timing = _TimedStore(store)
            client = OpenAIChatClient(http, model="bench-model", base_url=llm.base_url)
            agent = ChatClientAgent(
                client,
                instructions="You are OpsGate.",
                store=timing,
                context=ContextBudget(context_tokens=BUDGET),
            )
            threads: list[tuple[str, str]] = []
            for i in range(WARMUP + SAMPLES):
                small_id = await _seed(store, f"small-{i}", SMALL)
                large_id = await _seed(store, f"large-{i}", LARGE)
                await _turn(agent, timing, llm, small_id)  # each thread's first turn: untimed
                await _turn(agent, timing, llm, large_id, compacts=True)
                order = [(small, small_id), (large, large_id)]
                for into, sid in order if i % 2 else reversed(order):
                    turn = await _turn(agent, timing, llm, sid)
                    if i >= WARMUP:
                        into.append(turn)
                threads.append((small_id, large_id))
            small_alone, large_alone = await _appends_alone(store, threads[WARMUP:])
            if llm.unexpected:
                raise RuntimeError(f"{len(llm.unexpected)} request(s) found no reply queued")

    print(
        f"one turn = question + streamed answer, context budget {BUDGET:,} tokens; medians of "
        f"{SAMPLES} second turns on fresh threads (the first turn compacted the long one)"
    )
    table = Table("", f"{SMALL} prior messages", f"{LARGE:,} prior messages", "ratio")
    for label, field in (
        ("turn (wall)", "wall"),
        ("storage writes (2 commits)", "write"),
        ("history load", "load"),
    ):
        a, b = _median(small, field), _median(large, field)
        table.add(label, ms(a), ms(b), ratio(b, a))
        if field == "write":
            a, b = statistics.median(small_alone), statistics.median(large_alone)
            table.add("  one append, timed alone", ms(a), ms(b), ratio(b, a))
    a = _median(small, "wall") - _median(small, "write") - _median(small, "load")
    b = _median(large, "wall") - _median(large, "write") - _median(large, "load")
    table.add("rest: model request + loop", ms(a), ms(b), ratio(b, a))
    a, b = _median(small, "body_bytes"), _median(large, "body_bytes")
    table.add("request body sent to the model", f"{a:,.0f} B", f"{b:,.0f} B", ratio(b, a))
    a, b = _median(small, "messages_sent"), _median(large, "messages_sent")
    table.add("messages sent to the model", f"{a:.0f}", f"{b:.0f}", ratio(b, a))
    table.print()
    a, b = _median(small, "wall"), _median(large, "wall")
    verdict = "met" if b <= 1.3 * a else "NOT met"
    print(f"goal: a turn at {LARGE:,} prior messages within 1.3x of one at {SMALL}: {verdict}")


if __name__ == "__main__":
    asyncio.run(main())
