"""A run's memory is bounded: the LLM stand-in offers a 1 GB answer to a real `opsgate run`
child, which stops the stream at `OPSGATE_MAX_ANSWER_CHARS`, keeps what came and tells the
thread, while its resident memory (read from /proc as it runs) stays under a bound."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from tests.support.bot_process import bot_process
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

OFFERED = 1 << 30
"""Bytes of answer the stand-in is ready to stream."""
CHUNK = 1 << 16
RSS_BOUND = 400 << 20
"""The child's resident memory must stay under this (it took 4.86 GB before the limit)."""


def _rss(pid: int) -> int:
    """The process's resident set size in bytes (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _endless(body: dict[str, Any]) -> web.Response:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        data = {"id": "big", "object": "chat.completion.chunk", "created": 0, "choices": [choice]}
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    async def stream() -> AsyncIterator[bytes]:
        yield chunk({"role": "assistant", "content": ""})
        piece = chunk({"content": "x" * CHUNK})
        for _ in range(OFFERED // CHUNK):
            yield piece
        yield chunk({}, "stop")
        yield b"data: [DONE]\n\n"

    return web.Response(body=stream(), headers={"Content-Type": "text/event-stream"})


async def test_a_1_gb_answer_is_stopped_at_the_limit_with_memory_bounded(tmp_path: Path) -> None:
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:

        async def handler(body: dict[str, Any]) -> web.StreamResponse:
            return _endless(body)

        llm.reply_with(handler)
        limit = 4_000_000
        async with (
            bot_process(tmp_path, llm, slack, OPSGATE_MAX_ANSWER_CHARS=str(limit)) as bot,
            httpx.AsyncClient(timeout=10) as http,
        ):
            pid = bot.process.pid
            peak = _rss(pid)
            started = time.monotonic()
            assert await bot.mention(http, "say a lot", ts="1700000001.000100") == 200

            async def stopped_said() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, _rss(pid))
                    assert peak < RSS_BOUND, f"resident memory reached {peak >> 20} MB"
                    said = [str(c.params.get("text")) for c in slack.calls_to("chat.postMessage")]
                    if any("I stopped this answer at 4,000,000 characters" in t for t in said):
                        return
                    await asyncio.sleep(0.05)  # sampling memory, not waiting for an event

            await asyncio.wait_for(stopped_said(), 30)
            elapsed = time.monotonic() - started
            await bot.wait_for_line("answer past 4000000 characters, stopped")
            peak = max(peak, _rss(pid))
            assert peak < RSS_BOUND
            print(f"peak RSS {peak >> 20} MB, stopped after {elapsed:.1f} s")
        # What came is kept: the thread shows the answer's start (and attaches it whole).
        shown = "".join(str(c.params.get("text")) for c in slack.calls_to("chat.postMessage"))
        shown += "".join(str(c.params.get("text")) for c in slack.calls_to("chat.update"))
        assert "xxxxxxxx" in shown
