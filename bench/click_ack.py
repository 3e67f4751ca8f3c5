"""Click acknowledgement: `python bench/click_ack.py` (about 1-2 minutes).

Slack shows an error to whoever clicked unless the app answers the interaction with HTTP 200
within 3 s, so a click must be acknowledged before any slow work. Every measured click is a real
decision: each round first starts 200 runs that pause on a gated call (200 threads, 200 approval
cards, 200 ledger rows), then 50 concurrent clients send one signed `block_actions` Approve
click on each card, by a teammate allowed to approve. So every click decides its own card and
resumes its own run (the tool runs, the model answers, the answer is streamed into the thread),
and all of that happens after the ack on the same event loop, competing with the acks still
queued. The app is the real one in HTTP mode (`running_bot`: Bolt + the OpsGate listeners, the
Slack Web API stand-in, the LLM stand-in, the SQLite file). The floor is the same number of
clicks against a bare Bolt `AsyncApp` served by the same aiohttp adapter
(`bot.server.http_app`) with the same signing secret, whose handler only acks.

The p50 and the p99 are taken over ALL the clicks of all rounds (not per round). The clients
(aiohttp, one connection each) run in a separate process, so the server's event loop is measured
alone. Rounds alternate which app goes first. Bolt's listener runner polls for `ack()` every
10 ms, so neither app can answer much faster than that.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import multiprocessing
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import aiohttp
from _common import Checks, Table, bare_bolt_app, machine, ms, p50, p99, ratio, serve_bolt

from agent_core import tool
from bot.slack.ids import ACTION_APPROVE
from tests.support.harness import CHANNEL, SECRET, TEAM, Bot, running_bot
from tests.support.slack_requests import block_actions, interaction_body, sign

CLICKS = 200
"""Cards, and so clicks, per round."""
CLIENTS = 50
ROUNDS = 4
WARMUP_CARDS = 50
SETUP_BATCH = 25
"""Mentions sent at once while the pending cards of a round are set up."""
SLACK_DEADLINE = 3.0
REQUESTER = "U0ALICE"

Request = tuple[bytes, dict[str, str]]
"""A signed request: its body and headers."""


@tool(requires_approval=True)
async def restart(service: str) -> str:
    """Restart a service (needs a human's approval)."""
    return f"restarted {service}"


@dataclass(frozen=True)
class _Card:
    """A pending approval card: its ledger id and the ts of its Slack message."""

    ledger_id: str
    card_ts: str


def _signed_click(card: _Card, user: str) -> Request:
    payload = block_actions(
        ACTION_APPROVE,
        card.ledger_id,
        user=user,
        channel=CHANNEL,
        message_ts=card.card_ts,
        team=TEAM,
    )
    body = interaction_body(payload)
    headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(SECRET, body)}
    return body, headers


def _clicks(cards: Sequence[_Card]) -> list[Request]:
    """One signed Approve click per card, each by a different teammate (not the requester)."""
    return [_signed_click(card, f"U0CLICK{i:04d}") for i, card in enumerate(cards)]


# -- the clients (in a child process) --------------------------------------------------------


async def _fire_async(
    url: str, requests: Sequence[Request], clients: int
) -> list[tuple[int, float]]:
    queue = iter(requests)
    results: list[tuple[int, float]] = []
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def client() -> None:
            for body, headers in queue:
                started = time.perf_counter()
                async with http.post(url, data=body, headers=headers) as response:
                    await response.read()
                results.append((response.status, time.perf_counter() - started))

        await asyncio.gather(*(client() for _ in range(clients)))
    return results


def _fire(url: str, requests: Sequence[Request], clients: int) -> list[tuple[int, float]]:
    """Send the requests from `clients` concurrent clients; (status, seconds to the answer)."""
    return asyncio.run(_fire_async(url, requests, clients))


def _ready() -> bool:
    return True


# -- the servers -----------------------------------------------------------------------------


class _Setup:
    """Starts runs that pause on a gated call, and finds their cards."""

    def __init__(self, bot: Bot) -> None:
        self.bot = bot
        self.started = 0
        self.seen: set[str] = set()

    async def pending_cards(self, count: int) -> list[_Card]:
        """`count` new pending cards, each of its own run in its own thread."""
        bot = self.bot
        for first in range(0, count, SETUP_BATCH):
            batch = range(self.started, self.started + min(SETUP_BATCH, count - first))
            for n in batch:
                bot.llm.reply_tool_calls([(f"call_{n}", "restart", {"service": f"web-{n}"})])
            await asyncio.gather(
                *(
                    bot.mention(f"restart web-{n}", user=REQUESTER, ts=f"17{n:08d}.000100")
                    for n in batch
                )
            )
            self.started += len(batch)
            await bot.wait_cards(self.started, timeout=60)
        cards: list[_Card] = []
        for card in bot.cards():
            ledger_id = card["ledger_id"]
            if ledger_id in self.seen:
                continue
            self.seen.add(ledger_id)
            row = await bot.deps.store.get_call(ledger_id)
            if row is None or row.status != "pending" or row.card_ts is None:
                raise RuntimeError(f"card {ledger_id!r} is not pending: {row!r}")
            cards.append(_Card(ledger_id, row.card_ts))
        if len(cards) != count:
            raise RuntimeError(f"expected {count} new pending cards, found {len(cards)}")
        return cards


@dataclass
class _Measured:
    real: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    """Seconds to the HTTP 200 of each click."""
    statuses: list[int] = field(default_factory=list)
    cards: list[_Card] = field(default_factory=list)
    """Every card clicked, warm-up included."""


async def _round(
    pool: ProcessPoolExecutor,
    setup: _Setup,
    urls: tuple[str, str],
    cards: int,
    measured: _Measured,
    *,
    record: bool,
    real_first: bool = True,
) -> None:
    """One card per click: set up `cards` pending cards, click each once (and as many clicks
    on the bare app), then wait until every resumed run has answered."""
    bot = setup.bot
    loop = asyncio.get_running_loop()
    pending = await setup.pending_cards(cards)
    measured.cards += pending
    for n in range(cards):
        bot.llm.reply_text(f"Restarted, answer {n}.")  # the resumes, in whatever order
    real_url, bare_url = urls
    bare_card = _Card("bare", pending[0].card_ts)
    order = [
        (real_url, _clicks(pending), measured.real),
        (bare_url, _clicks([bare_card] * cards), measured.bare),
    ]
    for url, requests, into in order if real_first else order[::-1]:
        results = await loop.run_in_executor(pool, _fire, url, requests, CLIENTS)
        if record:
            measured.statuses += [status for status, _ in results]
            into += [seconds for _, seconds in results]
        await bot.settle(timeout=120)  # the next batch starts on a quiet loop


async def _measure(pool: ProcessPoolExecutor, tmp: Path, checks: Checks) -> _Measured:
    measured = _Measured()
    async with (
        running_bot(tmp, tools=[restart]) as bot,
        serve_bolt(bare_bolt_app(bot.slack.url, SECRET)) as bare_url,
    ):
        urls = (f"{bot.url}/slack/events", bare_url)
        setup = _Setup(bot)
        await _round(pool, setup, urls, WARMUP_CARDS, measured, record=False)
        for round_no in range(ROUNDS):
            await _round(
                pool, setup, urls, CLICKS, measured, record=True, real_first=round_no % 2 == 0
            )
        statuses = [
            row.status if row else None
            for row in [await bot.deps.store.get_call(c.ledger_id) for c in measured.cards]
        ]
        done = statuses.count("done")
        checks.check(
            done == len(measured.cards),
            f"all {len(measured.cards)} cards approved once and their calls ran ({done} done)",
        )
        decisions = [a for a in await bot.deps.store.audit_rows() if a.event == "decision"]
        checks.check(
            len(decisions) == len(measured.cards), f"{len(measured.cards)} decisions recorded"
        )
        checks.check(bot.llm.unexpected == [], "no unexpected model request")
        checks.check(bot.llm.queued == 0, "every resumed run asked the model for its answer")
    return measured


async def main() -> None:
    print(machine())
    checks = Checks()
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(1, mp_context=spawn) as pool:
        # Start the client process (and its imports) before anything is measured.
        await asyncio.get_running_loop().run_in_executor(pool, _ready)
        measured = await _measure(pool, Path(tmp), checks)
    statuses = measured.statuses
    checks.check(all(s == 200 for s in statuses), f"all {len(statuses)} clicks answered 200")
    real, bare = measured.real, measured.bare
    print(
        f"{ROUNDS} rounds x {CLICKS} signed Approve clicks, each on its own pending card, from "
        f"{CLIENTS} concurrent clients (another process); the same count on the floor app"
    )
    table = Table("time to HTTP 200", "OpsGate app", "floor: bare Bolt ack", "ratio")
    table.add(f"p50 of all {len(real)}", ms(p50(real)), ms(p50(bare)), ratio(p50(real), p50(bare)))
    table.add(f"p99 of all {len(real)}", ms(p99(real)), ms(p99(bare)), ratio(p99(real), p99(bare)))
    table.add("max", ms(max(real)), ms(max(bare)), ratio(max(real), max(bare)))
    table.print()
    met = p50(real) <= 1.3 * p50(bare)
    print(f"goal: p50 ratio <= 1.3: {'met' if met else 'NOT met'}")
    print(
        f"p99 of all clicks against Slack's {SLACK_DEADLINE:.0f} s deadline: {ms(p99(real))} = "
        f"{p99(real) / SLACK_DEADLINE:.1%} of it"
    )
    checks.exit_on_failure()


if __name__ == "__main__":
    asyncio.run(main())
