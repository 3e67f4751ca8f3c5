"""Click acknowledgement: `python bench/click_ack.py` (about 20-30 s).

Slack shows an error to whoever clicked unless the app answers the interaction with HTTP 200
within 3 s, so a click must be acknowledged before any slow work. In each round, 200 signed
`block_actions` clicks on one real pending approval card are sent by 50 concurrent clients to
the real app in HTTP mode (`running_bot`: Bolt + the OpsGate listeners, the Slack Web API
stand-in, the LLM stand-in, the SQLite file). The first click by someone allowed approves the
card and resumes the run; the rest are "already decided" or "you cannot approve your own
request": all of it goes on after the ack, on the same event loop, so it competes with the acks
still queued. The floor is the same load against a bare Bolt `AsyncApp` served by the same
aiohttp adapter (`bot.server.http_app`) with the same signing secret, whose handler only acks.

The clients (aiohttp, one connection each) run in a separate process, so the server's event loop
is measured alone. Rounds
alternate between the two apps; each real round has a fresh pending card. Bolt's listener runner
polls for `ack()` every 10 ms, so neither app can answer much faster than that.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import aiohttp
from _common import Checks, Table, bare_bolt_app, machine, ms, p50, p99, ratio, serve_bolt

from agent_core import tool
from bot.slack.blocks import ACTION_APPROVE
from tests.support.harness import CHANNEL, SECRET, TEAM, Bot, running_bot
from tests.support.slack_requests import block_actions, interaction_body, sign

CLICKS = 200
CLIENTS = 50
ROUNDS = 10
WARMUP_CLICKS = 50
SLACK_DEADLINE = 3.0
REQUESTER = "U0ALICE"

Request = tuple[bytes, dict[str, str]]
"""A signed request: its body and headers."""


@tool(requires_approval=True)
async def restart(service: str) -> str:
    """Restart a service (needs a human's approval)."""
    return f"restarted {service}"


def _clicks(ledger_id: str, card_ts: str, count: int) -> list[Request]:
    """`count` signed Approve clicks on one card: every tenth by the requester, who may not
    approve, the others by distinct teammates (the first to arrive decides)."""
    out: list[Request] = []
    for i in range(count):
        user = REQUESTER if i % 10 == 0 else f"U0CLICK{i:03d}"
        payload = block_actions(
            ACTION_APPROVE, ledger_id, user=user, channel=CHANNEL, message_ts=card_ts, team=TEAM
        )
        body = interaction_body(payload)
        headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(SECRET, body)}
        out.append((body, headers))
    return out


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


async def _pending_card(bot: Bot, round_no: int) -> tuple[str, str]:
    """Start a run that pauses on one gated call; its card's ledger id and message ts."""
    bot.llm.reply_tool_calls([(f"call_{round_no}", "restart", {"service": f"web-{round_no}"})])
    bot.llm.reply_text(f"Restarted web-{round_no}.")  # the resume, after the first approval
    await bot.mention(f"restart web-{round_no}", user=REQUESTER, ts=f"1700001{round_no:03d}.000100")
    cards = await bot.wait_cards(round_no + 1)
    ledger_id = cards[-1]["ledger_id"]
    row = await bot.deps.store.get_call(ledger_id)
    if row is None or row.status != "pending" or row.card_ts is None:
        raise RuntimeError(f"card {ledger_id!r} of round {round_no} is not pending: {row!r}")
    return ledger_id, row.card_ts


@dataclass
class _Measured:
    real: list[list[float]] = field(default_factory=list)
    bare: list[list[float]] = field(default_factory=list)
    """Seconds to the HTTP 200 of each click, per round."""
    statuses: list[int] = field(default_factory=list)


async def _measure(pool: ProcessPoolExecutor, tmp: Path, checks: Checks) -> _Measured:
    loop = asyncio.get_running_loop()
    measured = _Measured()
    async with (
        running_bot(tmp, tools=[restart]) as bot,
        serve_bolt(bare_bolt_app(bot.slack.url, SECRET)) as bare_url,
    ):
        real_url = f"{bot.url}/slack/events"
        warm = _clicks("no-such-card", "1700000000.000001", WARMUP_CLICKS)
        for url in (real_url, bare_url):
            await loop.run_in_executor(pool, _fire, url, warm, CLIENTS)
        await bot.settle()
        ledger_ids: list[str] = []
        for round_no in range(ROUNDS):
            ledger_id, card_ts = await _pending_card(bot, round_no)
            ledger_ids.append(ledger_id)
            order = [
                (real_url, _clicks(ledger_id, card_ts, CLICKS), measured.real),
                (bare_url, _clicks("bare", card_ts, CLICKS), measured.bare),
            ]
            for url, requests, into in order if round_no % 2 == 0 else order[::-1]:
                results = await loop.run_in_executor(pool, _fire, url, requests, CLIENTS)
                measured.statuses += [status for status, _ in results]
                into.append([seconds for _, seconds in results])
                await bot.settle(timeout=60)  # the next batch starts on a quiet loop
        for ledger_id in ledger_ids:
            row = await bot.deps.store.get_call(ledger_id)
            checks.check(
                row is not None and row.status == "done",
                f"card {ledger_id[:8]}... approved once and its call ran",
            )
        decisions = [a for a in await bot.deps.store.audit_rows() if a.event == "decision"]
        checks.check(len(decisions) == ROUNDS, f"{ROUNDS} decisions recorded, no more")
        checks.check(bot.llm.unexpected == [], "no unexpected model request")
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
    real = [seconds for batch in measured.real for seconds in batch]
    bare = [seconds for batch in measured.bare for seconds in batch]
    real_p99s = statistics.median(p99(batch) for batch in measured.real)
    bare_p99s = statistics.median(p99(batch) for batch in measured.bare)

    print(
        f"{ROUNDS} rounds x {CLICKS} signed block_actions clicks from {CLIENTS} concurrent "
        f"clients (another process), per app"
    )
    table = Table("time to HTTP 200", "OpsGate app", "floor: bare Bolt ack", "ratio")
    table.add(f"p50 of all {len(real)}", ms(p50(real)), ms(p50(bare)), ratio(p50(real), p50(bare)))
    table.add(f"p99 of all {len(real)}", ms(p99(real)), ms(p99(bare)), ratio(p99(real), p99(bare)))
    label = f"p99 per round, median of {ROUNDS}"
    table.add(label, ms(real_p99s), ms(bare_p99s), ratio(real_p99s, bare_p99s))
    table.add("max", ms(max(real)), ms(max(bare)), ratio(max(real), max(bare)))
    table.print()
    met = p50(real) <= 1.3 * p50(bare) and real_p99s <= 1.3 * bare_p99s
    print(f"goal: ratio <= 1.3 (p50, and the median round's p99): {'met' if met else 'NOT met'}")
    print(
        f"p99 of all clicks against Slack's {SLACK_DEADLINE:.0f} s deadline: {ms(p99(real))} = "
        f"{p99(real) / SLACK_DEADLINE:.1%} of it"
    )
    checks.exit_on_failure()


if __name__ == "__main__":
    asyncio.run(main())
