"""Two `opsgate run --http` replicas on one PostgreSQL database: a request posted to one is
decided by a click on it and seen by a long poll on the other; both sign with one key, and an
idempotency key holds across them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from bot.plane.receipts import public_keys, verify
from tests.plane.support import Plane, write_policy
from tests.support.bot_process import bot_process
from tests.support.llm_server import LLMStandIn
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.slack_api import SlackAPIStandIn

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures this module uses

pytestmark = pytest.mark.processes


async def test_a_long_poll_on_another_replica_sees_the_decision(
    postgres_url: str, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path)
    env = {"OPSGATE_POLICY": str(policy), "OPSGATE_DB": postgres_url}
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=60) as http,
        bot_process(tmp_path, llm, slack, **env) as first,
        bot_process(tmp_path, llm, slack, **env) as second,
    ):
        one, two = (
            Plane(first, slack, llm, http, tmp_path),
            Plane(second, slack, llm, http, tmp_path),
        )
        body = {
            "tool": "run_command",
            "arguments": {"command": "echo both"},
            "idempotency_key": "x",
        }
        posted = await one.post(body)
        again = await two.post(body)
        assert (posted.status_code, again.status_code) == (201, 200)
        request_id = posted.json()["id"]
        assert again.json()["id"] == request_id
        polling = asyncio.create_task(two.get(request_id, wait=45))
        ledger_id, card_ts = await one.card()
        assert not polling.done()
        assert await one.click("opsgate_approve", ledger_id, card_ts, "U0BOB") == 200
        answer = await asyncio.wait_for(polling, 50)
        assert answer["state"] == "approved"
        keys_one = (await http.get(f"{first.url}/v1/keys")).json()
        keys_two = (await http.get(f"{second.url}/v1/keys")).json()
        assert keys_one == keys_two
        claims = verify(answer["receipt"], public_keys(keys_one), now=time.time())
        assert claims.approvers == ("U0BOB",) and claims.argv == ("echo", "both")
        assert len(one.cards()) == 1
        assert llm.requests == []
