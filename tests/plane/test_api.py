"""The approval plane's HTTP API against a real `opsgate run --http` with the Slack stand-in:
an outside request becomes a card like an agent's, decided by signed clicks."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tests.plane.support import OTHER_TOKEN, Plane, plane_bot
from tests.support.bot_process import SECRET
from tests.support.slack_requests import event_body, message, sign

pytestmark = pytest.mark.processes


def _count(db: Path, table: str) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def _requests(db: Path) -> int:
    return _count(db, "plane_requests")


def _events(db: Path, event: str) -> list[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [r[0] for r in conn.execute("SELECT details FROM audit WHERE event = ?", (event,))]


async def _until_inbox_done(db: Path, timeout: float = 30) -> None:
    """Until every saved delivery was processed (the store's own record of it)."""

    def undone() -> int:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT COUNT(*) FROM inbox WHERE state != 'done'").fetchone()
            return int(rows[0])

    async with asyncio.timeout(timeout):
        while undone():  # noqa: ASYNC110 -- the database says when: no event to wait on
            await asyncio.sleep(0.05)


async def test_an_outside_request_is_a_card_and_its_approval_a_receipt(tmp_path: Path) -> None:
    async with plane_bot(tmp_path) as plane:
        response = await plane.post(
            {"tool": "run_command", "arguments": {"command": "echo hi"}, "reason": "deploy 42"}
        )
        assert response.status_code == 201, response.text
        created = response.json()
        assert created["state"] == "pending" and len(created["digest"]) == 12
        ledger_id, card_ts = await plane.card()
        shown = plane.slack.message("C0OPS", card_ts)
        assert shown is not None and "ci" in str(shown) and "deploy 42" in str(shown)
        assert (await plane.get(created["id"]))["state"] == "pending"
        assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0BOB") == 200
        answer = await plane.get(created["id"], wait=20)
        assert answer["state"] == "approved"
        assert answer["decided_by"] == ["U0BOB"]
        assert answer["receipt"].count(".") == 2
        keys = (await plane.http.get(f"{plane.bot.url}/v1/keys")).json()
        assert keys["keys"][0]["crv"] == "Ed25519"
        # A reply in the card's thread is the card's: it starts no agent run.
        [card] = plane.cards()
        root = str(card.params["thread_ts"])
        reply = message(
            "<@UBOT> run it now",
            channel="C0OPS",
            user="U0BOB",
            ts="1700000100.000100",
            event_id="EvReply",
            thread_ts=root,
        )
        body = event_body(reply)
        sent = await plane.http.post(
            f"{plane.bot.url}/slack/events",
            content=body,
            headers={"Content-Type": "application/json", **sign(SECRET, body)},
        )
        assert sent.status_code == 200
        await _until_inbox_done(tmp_path / "opsgate.db")
        assert _count(tmp_path / "opsgate.db", "run_queue") == 0
        assert plane.llm.requests == []
    assert _events(tmp_path / "opsgate.db", "plane_request")


async def test_a_repeated_idempotency_key_is_the_same_request_and_one_card(
    tmp_path: Path,
) -> None:
    body = {"tool": "run_command", "arguments": {"command": "echo once"}, "idempotency_key": "k1"}
    async with plane_bot(tmp_path) as plane:
        first = await plane.post(body)
        second = await plane.post(body)
        assert (first.status_code, second.status_code) == (201, 200)
        assert first.json()["id"] == second.json()["id"]
        assert "permalink" not in first.json()  # the card is posted after the 201
        await plane.card()
        link = await _linked(plane, first.json()["id"])
        third = await plane.post(body)  # a retry once the card is up: it links to it
        assert third.status_code == 200 and third.json()["permalink"] == link
        assert len(plane.cards()) == 1
    assert _requests(tmp_path / "opsgate.db") == 1


async def _linked(plane: Plane, request_id: str) -> str:
    """The card's permalink, once the bot has recorded where its card went (just after Slack
    answered the post the stand-in has seen): asked for until then, for at most 10 s."""
    async with asyncio.timeout(10):
        while "permalink" not in (answer := await plane.get(request_id)):
            pass
    return str(answer["permalink"])


async def test_forbidden_and_allowed_are_answered_at_once_without_a_card(
    tmp_path: Path,
) -> None:
    async with plane_bot(tmp_path) as plane:
        forbidden = await plane.post({"tool": "run_command", "arguments": {"command": "rm -rf /"}})
        assert forbidden.status_code == 201
        answer = await plane.get(forbidden.json()["id"])
        assert answer["state"] == "forbidden" and "never" in answer["reason"]
        allowed = await plane.post({"tool": "run_command", "arguments": {"command": "uptime"}})
        answer = await plane.get(allowed.json()["id"])
        assert answer["state"] == "allowed" and answer["receipt"]
        assert plane.cards() == []


async def test_refusals_are_audited_and_record_no_request(tmp_path: Path) -> None:
    good = {"tool": "run_command", "arguments": {"command": "echo hi"}}
    async with plane_bot(tmp_path) as plane:
        assert (await plane.post(good, token="wrong")).status_code == 401
        no_token = await plane.http.post(f"{plane.bot.url}/v1/approvals", json=good)
        assert no_token.status_code == 401
        assert (await plane.post({**good, "channel": "C0ELSE"})).status_code == 403
        assert (await plane.post({**good, "tool": "http_request"})).status_code == 403
        other = {**good, "channel": "C0OPS"}
        assert (await plane.post(other, token=OTHER_TOKEN)).status_code == 403
        bad = await plane.post({"tool": "run_command", "arguments": []})
        assert bad.status_code == 400 and "arguments" in bad.text
        big = {"tool": "run_command", "arguments": {"command": "echo " + "x" * 300_000}}
        assert (await plane.post(big)).status_code == 413
        assert plane.cards() == []
    db = tmp_path / "opsgate.db"
    assert _requests(db) == 0
    assert len(_events(db, "plane_refused")) == 7


async def test_no_client_configured_is_404(tmp_path: Path) -> None:
    import httpx

    from tests.support.bot_process import bot_process
    from tests.support.llm_server import LLMStandIn
    from tests.support.slack_api import SlackAPIStandIn

    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
        bot_process(tmp_path, llm, slack) as bot,
    ):
        response = await http.post(f"{bot.url}/v1/approvals", json={})
        assert response.status_code == 404


async def test_a_thread_slack_refuses_once_is_posted_on_the_next_try(tmp_path: Path) -> None:
    body = {"tool": "run_command", "arguments": {"command": "echo again"}}
    async with plane_bot(tmp_path) as plane:
        plane.slack.fail_next("chat.postMessage", error="internal_error")
        posted = await plane.post(body)
        assert posted.status_code == 201 and posted.json()["state"] == "pending"
        await plane.card()
        roots = [c for c in plane.slack.calls_to("chat.postMessage") if "thread_ts" not in c.params]
        assert [c.ok for c in roots] == [False, True]
        assert len(plane.cards()) == 1


async def test_a_channel_allowance_lets_the_same_shape_through_without_a_card(
    tmp_path: Path,
) -> None:
    allow = '\n[[tools.run_command.rules]]\nprefix = ["echo"]\nallow_prefix = ["echo", "hi"]\n'
    async with plane_bot(tmp_path, extra=allow, allow_for="1h") as plane:
        first = await plane.post({"tool": "run_command", "arguments": {"command": "echo hi one"}})
        ledger_id, card_ts = await plane.card()
        assert await plane.click("opsgate_allow", ledger_id, card_ts, "U0BOB") == 200
        assert (await plane.get(first.json()["id"], wait=20))["state"] == "approved"
        second = await plane.post({"tool": "run_command", "arguments": {"command": "echo hi two"}})
        answer = await plane.get(second.json()["id"])
        assert answer["state"] == "allowed" and "U0BOB" in answer["reason"]
        assert answer["receipt"]
        other = await plane.post({"tool": "run_command", "arguments": {"command": "echo bye"}})
        assert (await plane.get(other.json()["id"]))["state"] == "pending"
        assert len(plane.cards()) == 1
