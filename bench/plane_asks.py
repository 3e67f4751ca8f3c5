"""Outside requests: `python bench/plane_asks.py` (about a minute).

50 concurrent clients (another process) send `POST /v1/approvals` for run_command calls that
need a person, in rounds of 100; each answer is a 201 after the request is saved, and each
request's card follows through the same outbox and pacing as an agent's. The floor is the same
number of signed Approve clicks against a bare Bolt `AsyncApp` that only acks (as in
`click_ack.py`). Reported: p50 and p99 to the 201 against the floor's ack, and how long the
cards of a round take to be posted after its first request (the drain).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import hashlib
import json
import multiprocessing
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import aiohttp
from _common import Checks, Table, bare_bolt_app, machine, ms, p50, p99, ratio, serve_bolt
from aiohttp import web

from bot.plane.http import PlaneRoutes, plane_desk
from bot.policy import Policy
from bot.slack.ids import ACTION_APPROVE
from tests.support.harness import CHANNEL, SECRET, TEAM, running_bot
from tests.support.loopback import serve_on_loopback
from tests.support.slack_requests import block_actions, interaction_body, sign

ASKS = 100
CLIENTS = 50
ROUNDS = 3
TOKEN = "bench-token-0123456789"
POLICY = f"""
[plane]
channel = "{CHANNEL}"

[plane.clients.bench]
token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
requester = "U0BENCH"
"""

Request = tuple[bytes, dict[str, str]]


def _asks(round_no: int) -> list[Request]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    return [
        (
            json.dumps(
                {"tool": "run_command", "arguments": {"command": f"deploy web-{round_no}-{n}"}}
            ).encode(),
            headers,
        )
        for n in range(ASKS)
    ]


def _clicks() -> list[Request]:
    out = []
    for n in range(ASKS):
        payload = block_actions(
            ACTION_APPROVE, "bare", user=f"U0C{n:04d}", channel=CHANNEL, message_ts="1.1", team=TEAM
        )
        body = interaction_body(payload)
        out.append(
            (body, {"Content-Type": "application/x-www-form-urlencoded", **sign(SECRET, body)})
        )
    return out


async def _fire_async(url: str, requests: Sequence[Request]) -> list[tuple[int, float]]:
    queue = iter(requests)
    results: list[tuple[int, float]] = []
    connector = aiohttp.TCPConnector(limit=CLIENTS)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=60)
    ) as http:

        async def client() -> None:
            for body, headers in queue:
                started = time.perf_counter()
                async with http.post(url, data=body, headers=headers) as response:
                    await response.read()
                results.append((response.status, time.perf_counter() - started))

        await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return results


def _fire(url: str, requests: Sequence[Request]) -> list[tuple[int, float]]:
    return asyncio.run(_fire_async(url, requests))


def _ready() -> bool:
    return True


async def main() -> None:
    print(machine())
    checks = Checks()
    policy = Policy.from_toml(POLICY)
    real: list[float] = []
    bare: list[float] = []
    drains: list[float] = []
    statuses: list[int] = []
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(1, mp_context=spawn) as pool:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(pool, _ready)
        async with (
            running_bot(Path(tmp), policy=policy) as bot,
            serve_bolt(bare_bolt_app(bot.slack.url, SECRET)) as bare_url,
        ):
            app = web.Application()
            routes = PlaneRoutes(policy.plane)
            routes.add_to(app)
            routes.desk = await plane_desk(bot.service, bot.deps.store, None)
            runner, base = await serve_on_loopback(app)
            try:
                for round_no in range(ROUNDS):
                    began = time.perf_counter()
                    results = await loop.run_in_executor(
                        pool, _fire, f"{base}/v1/approvals", _asks(round_no)
                    )
                    statuses += [s for s, _ in results]
                    real += [t for _, t in results]
                    await bot.wait_cards(ASKS * (round_no + 1), timeout=300)
                    drains.append(time.perf_counter() - began)
                    clicked = await loop.run_in_executor(pool, _fire, bare_url, _clicks())
                    bare += [t for _, t in clicked]
            finally:
                await runner.cleanup()
            asked = [a for a in await bot.deps.store.audit_rows() if a.event == "plane_request"]
            checks.check(len(asked) == ASKS * ROUNDS, f"{ASKS * ROUNDS} requests audited")
            checks.check(len(bot.cards()) == ASKS * ROUNDS, "one card per request")
    checks.check(all(s == 201 for s in statuses), f"all {len(statuses)} requests answered 201")
    print(f"{ROUNDS} rounds x {ASKS} POST /v1/approvals from {CLIENTS} concurrent clients")
    table = Table("time to the answer", "POST /v1/approvals", "floor: bare Bolt ack", "ratio")
    table.add(f"p50 of all {len(real)}", ms(p50(real)), ms(p50(bare)), ratio(p50(real), p50(bare)))
    table.add(f"p99 of all {len(real)}", ms(p99(real)), ms(p99(bare)), ratio(p99(real), p99(bare)))
    table.print()
    print(f"goal: p50 ratio <= 1.5: {'met' if p50(real) <= 1.5 * p50(bare) else 'NOT met'}")
    print("drain (first request to the round's last card): " + ", ".join(ms(d) for d in drains))
    checks.exit_on_failure()


if __name__ == "__main__":
    asyncio.run(main())
