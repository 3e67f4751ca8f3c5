"""An outside request survives a kill -9 between its 201 and the click: the restarted bot posts
its card, and the decision and receipt come as if nothing happened."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import pytest

from bot.settings import HOLD_ENV
from tests.plane.support import plane_bot

pytestmark = pytest.mark.processes


async def test_a_kill_after_the_201_loses_neither_request_nor_decision(tmp_path: Path) -> None:
    body = {"tool": "run_command", "arguments": {"command": "echo survive"}}
    async with plane_bot(tmp_path, **{HOLD_ENV: "plane_card"}) as plane:
        response = await plane.post(body)
        assert response.status_code == 201
        request_id = response.json()["id"]
        await plane.bot.wait_for_line("opsgate-fault: holding at plane_card")
        assert await plane.bot.stop(signal.SIGKILL) == -signal.SIGKILL
        assert plane.cards() == []
    async with plane_bot(tmp_path) as plane:
        assert (await plane.get(request_id))["state"] == "pending"
        ledger_id, card_ts = await plane.card()
        assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0BOB") == 200
        answer = await plane.get(request_id, wait=20)
        assert answer["state"] == "approved" and answer["receipt"]
        assert len(plane.cards()) == 1
        assert plane.llm.requests == []


async def test_a_request_cut_while_opening_is_opened_once_by_the_next_start(
    tmp_path: Path,
) -> None:
    body = {"tool": "run_command", "arguments": {"command": "echo cut"}, "idempotency_key": "c"}
    db = tmp_path / "opsgate.db"
    async with plane_bot(tmp_path, **{HOLD_ENV: "plane_opening"}) as plane:
        posted = await plane.post(body)
        assert posted.status_code == 201
        await plane.bot.wait_for_line("opsgate-fault: holding at plane_opening")
        assert await plane.bot.stop(signal.SIGKILL) == -signal.SIGKILL
    # The opening began long ago as far as the database can tell (the grace is 30 s).
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE plane_requests SET opening_at = '2020-01-01T00:00:00.000000+00:00'")
    async with plane_bot(tmp_path) as plane:
        again = await plane.post(body)
        assert again.status_code == 200
        request_id = again.json()["id"]
        assert request_id == posted.json()["id"]
        ledger_id, card_ts = await plane.card()
        assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0BOB") == 200
        assert (await plane.get(request_id, wait=20))["state"] == "approved"
        assert len(plane.cards()) == 1
