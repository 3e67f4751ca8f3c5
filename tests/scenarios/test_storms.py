"""Storms through the stand-in that enforces Slack's tiers (issue 20), at a reduced scale of
size and time (`SPEED`: Slack's minute in a few seconds, on both sides): every answer arrives
whole and once, every command output is shown, no card keeps its buttons after its decision,
no 👀 is left behind, nothing is dropped and no 429 is told to anyone."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.scenarios.test_app import BOB, make_tools
from tests.support.harness import Bot, running_bot, texts
from tests.support.llm_server import LLMStandIn, sse_bytes
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits

SPEED = 15.0
"""Bucket seconds per second: Slack's minute passes in 4 s."""


def _chunk(body: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> Any:
    return {
        "id": "chatcmpl-storm",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": str(body.get("model")),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _sse(body: dict[str, Any], chunks: list[dict[str, Any]]) -> web.Response:
    return web.Response(body=sse_bytes(chunks), headers={"Content-Type": "text/event-stream"})


def _answer(body: dict[str, Any], text: str) -> web.Response:
    head = _chunk(body, {"role": "assistant", "content": ""})
    pieces = [_chunk(body, {"content": text[i : i + 400]}) for i in range(0, len(text), 400)]
    return _sse(body, [head, *pieces, _chunk(body, {}, "stop")])


def _tool_call(body: dict[str, Any], command: str) -> web.Response:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "run_command", "arguments": json.dumps({"command": command})},
    }
    head = _chunk(body, {"role": "assistant", "content": ""})
    return _sse(body, [head, _chunk(body, {"tool_calls": [call]}), _chunk(body, {}, "tool_calls")])


def _last_user(body: dict[str, Any]) -> str:
    users = [m for m in body["messages"] if m["role"] == "user"]
    return str(users[-1]["content"]) if users else ""


@contextlib.asynccontextmanager
async def storm_bot(tmp_path: Path) -> AsyncIterator[Bot]:
    limits = RateLimits(speed=SPEED)
    async with (
        SlackAPIStandIn(rate_limits=limits) as slack,
        running_bot(tmp_path, tools=make_tools(tmp_path), slack=slack) as bot,
    ):
        yield bot


FINE = "all fine. " * 80


def thread_text(slack: SlackAPIStandIn, root: str) -> str:
    """What the thread shows now: its messages' texts, in order."""
    return "".join(str(m.get("text")) for m in slack.messages if m.get("thread_ts") == root)


def _told_ratelimited(bot: Bot) -> list[str]:
    return [t for t in texts(bot.slack) if "ratelimited" in t or "couldn't post" in t]


def _reactions_left(slack: SlackAPIStandIn) -> int:
    added = [c for c in slack.calls_to("reactions.add") if c.ok]
    removed = [c for c in slack.calls_to("reactions.remove") if c.ok]
    return len(added) - len(removed)


async def test_alerts_over_channels_each_answered_once_whole(tmp_path: Path) -> None:
    async with storm_bot(tmp_path) as bot:

        async def answer(body: dict[str, Any]) -> web.StreamResponse:
            n = _last_user(body).rsplit(" ", 1)[-1]
            return _answer(body, f"Checked host-{n}: " + FINE)

        for _ in range(12):
            bot.llm.reply_with(answer)
        roots = await asyncio.gather(
            *(bot.mention(f"alert {i}", channel=f"C0STORM{i % 4}") for i in range(12))
        )
        await bot.settle(timeout=60)
        for i, root in enumerate(roots):
            assert thread_text(bot.slack, root).count(f"Checked host-{i}: {FINE}") == 1, i
        assert _told_ratelimited(bot) == []
        assert _reactions_left(bot.slack) == 0
        assert bot.service.ctx.output.outbox.dropped == {}  # type: ignore[attr-defined]


async def test_a_burst_of_approvals_leaves_no_buttons_and_shows_every_output(
    tmp_path: Path,
) -> None:
    async with storm_bot(tmp_path) as bot:

        async def turn(body: dict[str, Any]) -> web.StreamResponse:
            if body["messages"][-1]["role"] == "tool":
                return _answer(body, "Done: " + str(body["messages"][-1]["content"])[:60])
            n = _last_user(body).rsplit(" ", 1)[-1]
            return _tool_call(body, f"echo output-{n}")

        for _ in range(12):
            bot.llm.reply_with(turn)
        for i in range(6):
            await bot.mention(f"run job {i}", channel=f"C0BURST{i % 3}")
        cards = await bot.wait_cards(6, timeout=30)
        await asyncio.gather(
            *(bot.click("opsgate_approve", c["ledger_id"], user=BOB) for c in cards)
        )
        await bot.llm.wait_for_requests(12, timeout=60)
        await bot.settle(timeout=60)
        shown = "\n".join(texts(bot.slack))
        for i in range(6):
            assert f"output-{i}" in shown, f"the output of job {i}"
        posted = [
            c
            for c in bot.slack.calls_to("chat.postMessage")
            if c.ok and any(b.get("type") == "actions" for b in c.params.get("blocks") or [])
        ]
        assert len(posted) == 6
        for call in posted:
            ts = str(call.response["ts"])
            drawn = bot.slack.message(str(call.params["channel"]), ts)
            assert drawn is not None
            assert not any(b.get("type") == "actions" for b in drawn.get("blocks") or []), ts
        assert _told_ratelimited(bot) == []
        assert _reactions_left(bot.slack) == 0
        assert bot.service.ctx.output.outbox.dropped == {}  # type: ignore[attr-defined]


async def test_a_restart_redraws_only_the_cards_whose_call_moved_on(tmp_path: Path) -> None:
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        async with running_bot(tmp_path, tools=make_tools(tmp_path), llm=llm, slack=slack) as bot:
            for i in range(3):
                llm.reply_tool_calls([("call_1", "run_command", {"command": f"echo {i}"})])
                await bot.mention(f"job {i}", channel=f"C0KEEP{i}")
            cards = await bot.wait_cards(3)
            # Decided with no redraw owed (a release before the outbox owed them, then a
            # crash): stale. A store that owes redraws writes them with the decision.
            store = bot.deps.store
            store.owe_card_redraws(None)
            outcome = await store.decide(cards[0]["ledger_id"], "rejected", user_id=BOB)
            assert outcome.recorded
        before = len(slack.calls_to("chat.update"))
        llm.reply_text("Understood.")
        async with running_bot(tmp_path, tools=make_tools(tmp_path), llm=llm, slack=slack) as bot:
            await bot.settle()
        redraws = slack.calls_to("chat.update")[before:]
        assert len(redraws) == 1  # the two unchanged cards cost nothing
        assert "actions" not in str(redraws[0].params.get("blocks"))
