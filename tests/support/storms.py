"""The outbox's storms at any scale, and what is checked once each has drained.

Each storm sends its events through the running bot (`tests.support.harness.running_bot`
against `SlackAPIStandIn(rate_limits=...)`) and returns a check: the problems it finds, in
words (none when all is well). `problems` adds what every storm must hold: no 429 told to
anyone, no 👀 left nor removed twice, no card with buttons after its decision, no stream left
open (a paused run's timeline still saying "waiting" after its call ran), nothing dropped, every ack
(a mention's or a click's HTTP answer) within Slack's 3 s. `tests/scenarios/test_storms.py`
runs them small in `make test`; `bench/storms.py` at full scale, beside the floor.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from tests.support.harness import TEAM, Bot, texts
from tests.support.llm_server import sse_bytes
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import event_body

__all__ = [
    "ACK_SECONDS",
    "FINE",
    "Check",
    "Storm",
    "alerts_in_one_channel",
    "alerts_over_channels",
    "answer_sse",
    "approvals_burst",
    "home_tabs",
    "long_answers",
    "problems",
    "restart_answers",
    "thread_text",
    "tool_call_sse",
]

ACK_SECONDS = 3.0
"""Slack's limit on an acknowledgement."""
FINE = "all fine. " * 80
APPROVER = "U0BOB"
REQUESTER = "U0ALICE"

Check = Callable[[], list[str]]
T = TypeVar("T")


@dataclass
class Storm:
    """The bot a storm goes through, and how long each of its acks took."""

    bot: Bot
    acks: list[float] = field(default_factory=list)
    arrived: float = 0.0
    """When the storm's last event (a mention, a click, a Home tab opened) was acknowledged
    (`time.monotonic`): the bot cannot answer what has not arrived."""
    channels: set[str] = field(default_factory=set)
    """Where it was mentioned."""

    async def timed(self, ack: Awaitable[T]) -> T:
        """`ack` (an event sent to the bot), its time taken and its arrival noted."""
        started = time.monotonic()
        try:
            return await ack
        finally:
            self.arrived = time.monotonic()
            self.acks.append(self.arrived - started)

    async def mention(self, text: str, channel: str, user: str = REQUESTER) -> str:
        self.channels.add(channel)
        return await self.timed(self.bot.mention(text, channel=channel, user=user))

    async def approve(self, ledger_id: str, user: str = APPROVER) -> None:
        response = await self.timed(self.bot.click("opsgate_approve", ledger_id, user=user))
        assert response.status_code == 200, response.text


# -- what the model answers -----------------------------------------------------------------------


def _chunk(body: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> Any:
    return {
        "id": "chatcmpl-storm",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": str(body.get("model")),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _sse(chunks: list[dict[str, Any]]) -> web.Response:
    return web.Response(body=sse_bytes(chunks), headers={"Content-Type": "text/event-stream"})


def answer_sse(body: dict[str, Any], text: str) -> web.Response:
    """`text` streamed in pieces of 400 characters."""
    head = _chunk(body, {"role": "assistant", "content": ""})
    pieces = [_chunk(body, {"content": text[i : i + 400]}) for i in range(0, len(text), 400)]
    return _sse([head, *pieces, _chunk(body, {}, "stop")])


def tool_call_sse(body: dict[str, Any], command: str) -> web.Response:
    """One `run_command` call (gated: it waits for an approval)."""
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "run_command", "arguments": json.dumps({"command": command})},
    }
    head = _chunk(body, {"role": "assistant", "content": ""})
    return _sse([head, _chunk(body, {"tool_calls": [call]}), _chunk(body, {}, "tool_calls")])


def _last_user(body: dict[str, Any]) -> str:
    users = [m for m in body["messages"] if m["role"] == "user"]
    return str(users[-1]["content"]) if users else ""


async def _job(body: dict[str, Any]) -> web.StreamResponse:
    """ "job N": ask to run `echo output-N`; its result: answer "Done: <the output>"."""
    if body["messages"][-1]["role"] == "tool":
        return answer_sse(body, "Done: " + str(body["messages"][-1]["content"])[:60])
    n = _last_user(body).rsplit(" ", 1)[-1]
    return tool_call_sse(body, f"echo output-{n}")


# -- what the threads show ------------------------------------------------------------------------


def thread_text(slack: SlackAPIStandIn, root: str) -> str:
    """What the thread shows now: its messages' texts, in order."""
    return "".join(str(m.get("text")) for m in slack.messages if m.get("thread_ts") == root)


def _card_posts(slack: SlackAPIStandIn) -> list[tuple[str, str]]:
    """(channel, ts) of every approval card posted."""
    return [
        (str(c.params["channel"]), str(c.response["ts"]))
        for c in slack.calls_to("chat.postMessage")
        if c.ok and "opsgate_approve" in json.dumps(c.params.get("blocks") or [])
    ]


def _has_buttons(message: dict[str, Any] | None) -> bool:
    return message is not None and any(
        b.get("type") == "actions" for b in message.get("blocks") or []
    )


def _jobs_done(bot: Bot, roots: Sequence[str]) -> list[str]:
    """Each job's command output shown, and its answer exactly once."""
    shown = "\n".join(texts(bot.slack))
    out = [f"output {i} not shown" for i in range(len(roots)) if f"output-{i}" not in shown]
    for i, root in enumerate(roots):
        answers = [
            m
            for m in bot.slack.messages
            # In a storm the command's output heads the answer's message
            # (`bot.slack.output.HeldOutputs`).
            if m.get("thread_ts") == root and "Done: " in str(m.get("text"))
        ]
        if len(answers) != 1:
            out.append(f"job {i} answered {len(answers)} times")
    return out


def problems(storm: Storm, dropped: int | None = None) -> list[str]:
    """What no storm may leave behind (see the module docstring). `dropped`: the writes the
    outboxes dropped, when the storm went through more than its own bot's."""
    bot, slack = storm.bot, storm.bot.slack
    told = [t for t in texts(slack) if "ratelimited" in t or "couldn't post" in t]
    out = [f"told: {t[:80]!r}" for t in told[:3]]
    added = sum(1 for c in slack.calls_to("reactions.add") if c.ok)
    removed = sum(1 for c in slack.calls_to("reactions.remove") if c.ok)
    if added != removed:
        out.append(f"{added - removed} 👀 left")
    twice = [
        c for c in slack.calls_to("reactions.remove") if c.response.get("error") == "no_reaction"
    ]
    if twice:  # a Tier 3 call spent on a 👀 already gone
        out.append(f"{len(twice)} 👀 removed twice")
    live = [ts for channel, ts in _card_posts(slack) if _has_buttons(slack.message(channel, ts))]
    if live:
        out.append(f"{len(live)} decided cards keep their buttons")
    started = {str(c.response.get("ts")) for c in slack.calls_to("chat.startStream") if c.ok}
    stopped = {str(c.params.get("ts")) for c in slack.calls_to("chat.stopStream") if c.ok}
    if started - stopped:
        out.append(f"{len(started - stopped)} streams left open (a timeline or an answer)")
    if dropped is None:
        dropped = sum(bot.service.ctx.output.outbox.dropped.values())  # type: ignore[attr-defined]
    if dropped:
        out.append(f"dropped {dropped}")
    slow = [a for a in storm.acks if a >= ACK_SECONDS]
    if slow:
        out.append(f"{len(slow)} of {len(storm.acks)} acks took {ACK_SECONDS} s or more")
    return out


# -- the storms -----------------------------------------------------------------------------------


async def alerts_over_channels(storm: Storm, alerts: int, channels: int) -> Check:
    """`alerts` mentions at once over `channels` channels, each answered at length."""
    bot = storm.bot

    async def answer(body: dict[str, Any]) -> web.StreamResponse:
        n = _last_user(body).rsplit(" ", 1)[-1]
        return answer_sse(body, f"Checked host-{n}: " + FINE)

    for _ in range(alerts):
        bot.llm.reply_with(answer)
    roots = await asyncio.gather(
        *(storm.mention(f"alert {i}", f"C0STORM{i % channels:02d}") for i in range(alerts))
    )

    def check() -> list[str]:
        return [
            f"answer {i} shown {n} times"
            for i, root in enumerate(roots)
            if (n := thread_text(bot.slack, root).count(f"Checked host-{i}: {FINE}")) != 1
        ]

    return check


async def _approve_as_posted(storm: Storm, cards: int, timeout: float) -> None:
    """Approve each card as soon as it is posted, until `cards` were."""
    clicked: set[str] = set()
    while len(clicked) < cards:
        await storm.bot.slack.wait_for(
            "chat.postMessage",
            count=len(clicked) + 1,
            where=lambda c: c.ok and "opsgate_approve" in json.dumps(c.params.get("blocks") or []),
            timeout=timeout,
        )
        fresh = [c["ledger_id"] for c in storm.bot.cards() if c["ledger_id"] not in clicked]
        clicked.update(fresh)
        await asyncio.gather(*(storm.approve(ledger_id) for ledger_id in fresh))


async def alerts_in_one_channel(storm: Storm, alerts: int, timeout: float = 600) -> Check:
    """`alerts` mentions at once in one alert channel, each running a command that needs an
    approval, approved as its card arrives."""
    bot = storm.bot
    for _ in range(2 * alerts):
        bot.llm.reply_with(_job)
    roots = await asyncio.gather(
        *(storm.mention(f"alert job {i}", "C0ALERTS") for i in range(alerts))
    )
    await _approve_as_posted(storm, alerts, timeout)
    return lambda: _jobs_done(bot, roots)


async def approvals_burst(storm: Storm, approvals: int, channels: int) -> Check:
    """`approvals` cards over `channels` channels, then every one approved at once."""
    bot = storm.bot
    for _ in range(2 * approvals):
        bot.llm.reply_with(_job)
    roots = await asyncio.gather(
        *(storm.mention(f"job {i}", f"C0JOBS{i % channels}") for i in range(approvals))
    )
    cards = await bot.wait_cards(approvals, timeout=600)
    await asyncio.gather(*(storm.approve(c["ledger_id"]) for c in cards))
    return lambda: _jobs_done(bot, roots)


async def long_answers(storm: Storm, answers: int, chars: int) -> Check:
    """`answers` answers of `chars` characters streamed at once, one per channel."""
    bot = storm.bot
    text = ("Line of the long answer. " * (chars // 25 + 1))[:chars]
    lines = text.count("Line of the long answer.")

    async def answer(body: dict[str, Any]) -> web.StreamResponse:
        return answer_sse(body, text)

    for _ in range(answers):
        bot.llm.reply_with(answer)
    roots = await asyncio.gather(
        *(storm.mention(f"explain {i}", f"C0LONG{i}") for i in range(answers))
    )

    def check() -> list[str]:
        out = []
        for root in roots:
            shown = thread_text(bot.slack, root).replace("\n", "")
            if shown.count("Line of the long answer.") != lines:
                out.append(f"thread {root} shows {len(shown)} characters")
        return out

    return check


async def restart_answers(storm: Storm, answers: int, channels: int) -> Check:
    """`answers` mentions over `channels` channels whose runs are waiting on the model (or
    queued behind them) when the bot stops; its `restart_gate` (on the model stand-in) is set
    once the bot has started again, and the restarted bot answers every one (its recovery
    requeues them: no call had begun)."""
    bot = storm.bot
    gate = asyncio.Event()
    bot.llm.restart_gate = gate  # type: ignore[attr-defined]

    async def answer(body: dict[str, Any]) -> web.StreamResponse:
        await gate.wait()
        n = _last_user(body).rsplit(" ", 1)[-1]
        return answer_sse(body, f"Recovered host-{n}: " + FINE)

    for _ in range(2 * answers):
        bot.llm.reply_with(answer)
    roots = await asyncio.gather(
        *(storm.mention(f"alert {i}", f"C0BACK{i % channels:02d}") for i in range(answers))
    )
    running = sum(min(2, len(range(c, answers, channels))) for c in range(channels))
    await bot.llm.wait_for_requests(running, timeout=60)

    def check() -> list[str]:
        return [
            f"answer {i} shown {n} times"
            for i, root in enumerate(roots)
            if (n := thread_text(bot.slack, root).count(f"Recovered host-{i}: {FINE}")) != 1
        ]

    return check


def people(n: int) -> list[str]:
    """The approvers of the Home tab storm (its policy lists them)."""
    return [f"U0HOME{i:02d}" for i in range(n)]


def home_policy(n: int) -> str:
    return "[defaults]\napprovers = [" + ", ".join(f'"{u}"' for u in people(n)) + "]\n"


async def home_tabs(storm: Storm, n: int, timeout: float = 600) -> Check:
    """`n` approvers (the policy lists them) have their Home tab open; `n` requests each wait
    for an approval; each approver decides one, all at once. Every Home tab must end showing
    nothing left to decide."""
    bot = storm.bot
    for _ in range(2 * n):
        bot.llm.reply_with(_job)
    roots = [await storm.mention(f"job {i}", f"C0HOME{i % 4}") for i in range(n)]
    cards = await bot.wait_cards(n, timeout=timeout)
    for i, user in enumerate(people(n)):
        await storm.timed(_open_home(bot, user, i))
    await bot.settle(timeout=timeout, runs=False)
    await asyncio.gather(
        *(storm.approve(c["ledger_id"], user) for c, user in zip(cards, people(n), strict=True))
    )

    def check() -> list[str]:
        out = _jobs_done(bot, roots)
        for user in people(n):
            published = [c for c in bot.slack.calls_to("views.publish") if c.ok]
            mine = [c for c in published if c.params.get("user_id") == user]
            if not mine:
                out.append(f"{user}'s Home tab never published")
            elif "opsgate_approve" in json.dumps(mine[-1].params.get("view")):
                out.append(f"{user}'s Home tab still offers a decided call")
        return out

    return check


async def _open_home(bot: Bot, user: str, n: int) -> None:
    body = {
        "type": "event_callback",
        "token": "legacy-verification-token",
        "team_id": TEAM,
        "api_app_id": "ATEST",
        "event_id": f"Ev0HOMESTORM{n:04d}",
        "event_time": 1700000100,
        "event": {
            "type": "app_home_opened",
            "user": user,
            "channel": f"D0HOME{n:04d}",
            "tab": "home",
            "event_ts": f"1700000100.{n:06d}",
        },
    }
    response = await bot.post(event_body(body), "application/json")
    assert response.status_code == 200, response.text
