"""The audit webhook from a real bot process: every row delivered at least once and in seq
order, across a collector outage (retries, a metric, a `/readyz` reason) and a bot restart
(the cursor is in the database)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.support.bot_process import bot_process
from tests.support.llm_server import LLMStandIn
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.slack_api import SlackAPIStandIn

__all__ = ["postgres_cluster", "postgres_url"]

ROOT = Path(__file__).resolve().parents[2]

_WRITER = """
import asyncio, sys
from bot.store import open_store

async def main(target, actor, count):
    async with open_store(target) as store:
        for n in range(count):
            await store.audit("request", actor=actor, details={"n": n})

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


class Collector:
    """A SIEM's HTTP input: answers 503 while `down`, records what it accepted."""

    def __init__(self) -> None:
        self.down = True
        self.refused = 0
        self.deliveries: list[list[dict[str, Any]]] = []
        self.changed = asyncio.Condition()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        async with self.changed:
            if self.down:
                self.refused += 1
                self.changed.notify_all()
                return web.Response(status=503)
            assert request.content_type == "application/json"
            self.deliveries.append(body)
            self.changed.notify_all()
        return web.Response(status=204)

    def seqs(self) -> set[int]:
        return {row["seq"] for delivery in self.deliveries for row in delivery}

    async def wait_for(self, what: str, predicate: Any, timeout: float = 60) -> None:
        async def until() -> None:
            async with self.changed:
                await self.changed.wait_for(predicate)

        try:
            await asyncio.wait_for(until(), timeout)
        except TimeoutError:
            raise AssertionError(f"collector: no {what} in {timeout}s: {self.deliveries}") from None


@asynccontextmanager
async def collector() -> AsyncIterator[Collector]:
    found = Collector()
    app = web.Application()
    app.add_routes([web.post("/ingest", found.handle)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    found.url = f"http://127.0.0.1:{port}/ingest"
    try:
        yield found
    finally:
        await runner.cleanup()


async def _write(db: str, actor: str, count: int) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSGATE_")}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WRITER, db, actor, str(count), env={**env, "PYTHONPATH": str(ROOT)}
    )
    assert await asyncio.wait_for(child.wait(), 60) == 0


@pytest.fixture(params=["postgresql", "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "opsgate.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


async def test_every_row_reaches_the_collector_in_order_across_an_outage_and_a_restart(
    database: str, tmp_path: Path
) -> None:
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack, collector() as siem:
        policy = tmp_path / "policy.toml"
        policy.write_text(
            f'[audit]\nwebhook = "{siem.url}"\nretry_max = "1s"\nunready_after = 2\nbatch = 2\n'
        )
        env = {"OPSGATE_DB": database, "OPSGATE_POLICY": str(policy)}
        await _write(database, "U1", 3)
        async with bot_process(tmp_path, llm, slack, **env) as bot, httpx.AsyncClient() as http:
            # The export is sequential: a third request means it took in the second failure.
            await siem.wait_for("third refusal", lambda: siem.refused >= 3)
            ready = await http.get(f"{bot.url}/readyz")
            assert ready.status_code == 503 and "audit_export" in ready.text, ready.text
            scraped = (await http.get(f"{bot.url}/metrics")).text
            assert "opsgate_audit_export_failures_total 0.0" not in scraped
            assert "opsgate_audit_export_failures_total" in scraped
            assert "opsgate_audit_export_lag_seconds" in scraped
            async with siem.changed:
                siem.down = False
            await siem.wait_for("rows 1-3", lambda: {1, 2, 3} <= siem.seqs())
            ready = await http.get(f"{bot.url}/readyz")
            assert ready.status_code == 200, ready.text
            assert await bot.stop(signal.SIGTERM) == 0
        await _write(database, "U2", 3)  # while the bot is down
        async with bot_process(tmp_path, llm, slack, **env):
            await siem.wait_for("rows 4-6", lambda: {4, 5, 6} <= siem.seqs())

    delivered = 0
    hashes: dict[int, str] = {}
    for batch in siem.deliveries:
        seqs = [row["seq"] for row in batch]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), siem.deliveries
        assert seqs[0] <= delivered + 1, siem.deliveries  # never past a row not yet delivered
        delivered = max(delivered, seqs[-1])
        for row in batch:
            assert {"seq", "prev_hash", "hash", "event", "details"} <= row.keys()
            assert hashes.setdefault(row["seq"], row["hash"]) == row["hash"]
    users = [row["actor"] for batch in siem.deliveries for row in batch if row["actor"]]
    assert set(users) == {"U1", "U2"}
    assert json.dumps(siem.deliveries, ensure_ascii=False)  # plain JSON all the way
