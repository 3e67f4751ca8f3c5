"""A kill -9 in the middle of a storm loses nothing owed to Slack: a real
`opsgate run --http` child process, against the stand-in that enforces Slack's tiers, is killed
while its outbox still holds writes and a run is mid-answer; started again on the same file it
sends what was left, tells the cut run's thread, and leaves no 👀 behind."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import httpx

from bot.store import SQLiteStore
from tests.support.bot_process import bot_process
from tests.support.harness import HeldReplies
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits

COUNT = 10


async def test_a_kill_mid_storm_leaves_the_rest_of_the_outbox_to_the_restart(
    tmp_path: Path,
) -> None:
    stamps = [f"17000002{n:02d}.000100" for n in range(COUNT)]
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn(rate_limits=RateLimits()) as slack,
        httpx.AsyncClient(timeout=30) as http,
    ):
        held = HeldReplies()  # the first run is mid-answer (👀 on its message) at the kill
        held.queue(llm, 1)
        for _ in range(3 * COUNT):
            llm.reply_text("Looked into it.")
        async with bot_process(tmp_path, llm, slack) as bot:
            statuses = await asyncio.gather(
                *(bot.mention(http, f"request {ts}", ts=ts) for ts in stamps)
            )
            assert statuses == [200] * COUNT
            # One channel: its posts go at about one a second, so writes wait in the outbox.
            # The storm's later 👀 settle (their runs answer first, cancelling them); the
            # first goes at once.
            await slack.wait_for("reactions.add", count=1, where=lambda c: c.ok, timeout=30)
            await held.wait_arrived(1)
            assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
        held.release()
        async with SQLiteStore(tmp_path / "opsgate.db") as store:
            left = sum((await store.outbox_stats()).depth.values())
        async with bot_process(tmp_path, llm, slack) as bot:

            async def drained() -> None:
                while True:
                    if _marked(slack) == {} and _answered(slack) >= set(stamps):
                        return
                    await asyncio.sleep(0.2)  # polling the stand-in's record, not timing

            try:
                await asyncio.wait_for(drained(), 90)
            except TimeoutError:
                missing = sorted(set(stamps) - _answered(slack))
                raise AssertionError(f"still 👀: {_marked(slack)}; unanswered: {missing}") from None
            assert await bot.stop(signal.SIGTERM) == 0
        async with SQLiteStore(tmp_path / "opsgate.db") as store:
            assert (await store.outbox_stats()).depth == {}
    assert left > 0, "the kill came after the storm: nothing was left to send"
    texts = [str(c.params.get("text")) for c in slack.calls_to("chat.postMessage") if c.ok]
    assert not any("ratelimited" in t or "slow down" in t for t in texts)


def _marked(slack: SlackAPIStandIn) -> dict[str, int]:
    """Messages still showing 👀 (added more often than removed)."""
    net: Counter[str] = Counter()
    for call in slack.calls:
        if call.ok and call.method == "reactions.add":
            net[str(call.params.get("timestamp"))] += 1
        elif call.ok and call.method == "reactions.remove":
            net[str(call.params.get("timestamp"))] -= 1
    return {ts: n for ts, n in net.items() if n > 0}


def _answered(slack: SlackAPIStandIn) -> set[str]:
    """Threads that show an answer or say the run was cut by the restart."""
    out = set()
    for message in slack.messages:
        text = str(message.get("text"))
        if "Looked into it." in text or "restarted" in text:
            out.add(str(message.get("thread_ts")))
    return out
