"""A message the bot acts on goes through the one intake as one row and one commit before its
200 (burst: not a `request` row and then a `message` row, each its own wait), and
keeps every guarantee of the intake: dedupe per delivery, replay of rows left behind, the
author told when the database refuses, Slack's retry handled once. Through the real app over
signed loopback HTTP and a real SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from bot.runs.inbox import MessageDelivery
from bot.slack import app as intake
from bot.store import InboxItem, SQLiteStore
from tests.scenarios.test_app import ALICE, make_tools
from tests.scenarios.test_unsaved_clicks import _refuse_writes
from tests.support.harness import CHANNEL, Bot, running_bot
from tests.support.llm_server import LLMStandIn
from tests.support.slack_requests import app_mention, event_body, message

MENTION_TS = "1700000070.000100"


def _inbox(database: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, state, payload) of every inbox row, read through a connection of its own."""
    with sqlite3.connect(database) as raw:
        rows = raw.execute("SELECT kind, state, payload FROM inbox ORDER BY id").fetchall()
    return [(str(k), str(s), json.loads(p)) for k, s, p in rows]


def _mention(event_id: str, ts: str = MENTION_TS) -> dict[str, Any]:
    return app_mention(
        "<@UBOT> check the disk", channel=CHANNEL, user=ALICE, ts=ts, event_id=event_id
    )


def _commits(bot: Bot) -> list[str]:
    """The name of every write transaction the bot's store commits, in order."""
    store = bot.deps.store
    assert isinstance(store, SQLiteStore)
    db = store._db
    committed: list[str] = []
    transaction = db.transaction

    @contextlib.asynccontextmanager
    async def noted(what: str) -> AsyncIterator[Any]:
        async with transaction(what) as tx:
            yield tx
        committed.append(what)

    db.transaction = noted  # type: ignore[method-assign]
    return committed


def _written_before_ack(bot: Bot, committed: list[str]) -> list[list[str]]:
    """For each request that reached a listener: what had been committed when Bolt's listener
    runner began, the point where it acknowledges an event (before its listener runs)."""
    assert bot.app is not None
    runner = bot.app._async_listener_runner
    seen: list[list[str]] = []
    run = runner.run

    async def noting(*args: Any, **kwargs: Any) -> Any:
        seen.append(list(committed))
        return await run(*args, **kwargs)

    runner.run = noting  # type: ignore[method-assign]
    return seen


async def handed_back_once(tmp_path: Path, text: str) -> list[tuple[str, str]]:
    """Two starts on the rows saved before them: the first runs `text` once (the model's reply
    is queued before it starts, as it hands the rows back at once), the second finds nothing
    left to do. The (kind, state) of every inbox row after them."""
    async with LLMStandIn() as llm:
        llm.reply_text("Done.")
        async with running_bot(tmp_path, tools=make_tools(tmp_path), llm=llm) as bot:
            await llm.wait_for_requests(1)
            await bot.settle()
        assert [r["messages"][-1]["content"] for r in llm.requests] == [text]
        assert llm.unexpected == []
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        await bot.settle()
        assert bot.llm.requests == []
    return [(k, s) for k, s, _ in _inbox(tmp_path / "opsgate.db")]


async def test_a_mention_is_one_row_and_one_commit_before_its_200(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        await bot.settle()
        committed = _commits(bot)
        acked = _written_before_ack(bot, committed)
        bot.llm.reply_text("Disk is fine.")
        response = await bot.event(_mention("EvONE"))
        assert response.status_code == 200
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert acked == [["inbox_add"]]  # one commit, then the 200
        [(kind, state, payload)] = _inbox(tmp_path / "opsgate.db")
        assert (kind, state) == ("message", "done")  # the row the run was processed from
        assert payload["ts"] == MENTION_TS and payload["text"] == "check the disk"
        assert committed.count("inbox_add") == 1 and "inbox_done" in committed


async def test_a_mention_retried_and_sent_as_a_message_too_is_one_row_and_one_run(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Disk is fine.")
        bot.llm.reply_text("A second answer that must not come.")
        first = await bot.event(_mention("EvTWICE"))
        retry = await bot.event(
            _mention("EvTWICE"), **{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "timeout"}
        )
        # A channel mention arrives as `message` too (its own event id): the same run, once.
        as_message = message(
            "<@UBOT> check the disk", channel=CHANNEL, user=ALICE, ts=MENTION_TS, event_id="EvMSG"
        )
        also = await bot.post(event_body(as_message), "application/json")
        assert (first.status_code, retry.status_code, also.status_code) == (200, 200, 200)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert len(bot.llm.requests) == 1
        assert [k for k, _, _ in _inbox(tmp_path / "opsgate.db")] == ["message"]


async def test_a_mention_the_database_refuses_is_said_answered_500_and_taken_on_retry(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Disk is fine.")
        await _refuse_writes(bot, True)
        refused = await bot.event(_mention("EvREFUSED"))
        assert refused.status_code == 500  # Slack delivers it again later
        [told] = await bot.slack.wait_for("chat.postMessage")
        assert told.params["thread_ts"] == MENTION_TS
        assert "couldn't save your message" in told.params["text"]
        assert bot.llm.requests == []
        await _refuse_writes(bot, False)
        retried = await bot.event(_mention("EvREFUSED"), **{"X-Slack-Retry-Num": "1"})
        assert retried.status_code == 200
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert len(bot.llm.requests) == 1


async def test_a_mention_the_earlier_release_saved_as_two_rows_is_handled_once(
    tmp_path: Path,
) -> None:
    """Rows a kill -9 left under the release before this one: the request and its message,
    each with its own keys. The request is replayed through the listeners, whose own keys make
    the replay repeat nothing; the message row is processed: one run."""
    body = json.loads(event_body(_mention("EvOLD")))
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        store = bot.deps.store
        await store.inbox_add(
            "request",
            {"kind": "event_callback", "body": body},
            keys=["request:event_callback:T0TEST:EvOLD"],
        )
        delivery = {
            "team": "T0TEST",
            "channel": CHANNEL,
            "thread_ts": MENTION_TS,
            "user": ALICE,
            "text": "check the disk",
            "ts": MENTION_TS,
        }
        await store.inbox_add(
            "message", delivery, keys=["EvOLD", f"message:{CHANNEL}:{MENTION_TS}"]
        )
    assert await handed_back_once(tmp_path, "check the disk") == [
        ("request", "done"),
        ("message", "done"),
    ]


async def test_a_mention_saved_too_late_for_its_200_is_still_processed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database is slow: the intake stops waiting after `SAVE_SECONDS` and the event goes on
    to the message listener, whose own save waits in line behind the late one (group commit).
    The late one commits after all, as a delivery taken into a transaction under way does even
    when its caller gave up: its row is the one processed, once; the listener's is seen before."""
    monkeypatch.setattr(intake, "SAVE_SECONDS", 0.2)
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        inbox = bot.service.inbox
        save = inbox.save_message
        release, first_done, gave_up = asyncio.Event(), asyncio.Event(), asyncio.Event()
        calls: list[Sequence[str]] = []

        async def slow(delivery: MessageDelivery, *, keys: Sequence[str]) -> InboxItem | None:
            calls.append(keys)
            if len(calls) > 1:  # the listener's, in line behind the intake's
                await first_done.wait()
                return await save(delivery, keys=keys)
            while not release.is_set():  # the intake's: under way, whoever stops waiting
                with contextlib.suppress(asyncio.CancelledError):
                    await release.wait()
            try:
                return await save(delivery, keys=keys)
            finally:
                first_done.set()

        failed = bot.deps.write_health.failed

        def noted(what: str, exc: BaseException) -> None:
            failed(what, exc)
            gave_up.set()

        monkeypatch.setattr(inbox, "save_message", slow)
        monkeypatch.setattr(bot.deps.write_health, "failed", noted)
        bot.llm.reply_text("Disk is fine.")
        posted = asyncio.create_task(bot.event(_mention("EvSLOW")))
        await asyncio.wait_for(gave_up.wait(), 10)
        release.set()
        response = await asyncio.wait_for(posted, 10)
        assert response.status_code == 200
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert len(calls) == 2 and len(bot.llm.requests) == 1
        assert [(k, s) for k, s, _ in _inbox(tmp_path / "opsgate.db")] == [("message", "done")]
        assert all("couldn't save" not in str(c.params.get("text")) for c in bot.slack.calls)


async def test_a_mention_committed_but_answered_too_late_is_still_processed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intake's save has committed, and its answer comes only after `SAVE_SECONDS` (as
    SQLite's worker thread commits while the awaiting task waits): the intake does not cancel
    it, so the late answer still hands the row to the inbox. Cancelled there, the row would be
    saved and never processed (the listener's own save finds its keys taken)."""
    monkeypatch.setattr(intake, "SAVE_SECONDS", 0.2)
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        inbox = bot.service.inbox
        save = inbox.save_message
        answer = asyncio.Event()
        calls: list[Sequence[str]] = []

        async def late(delivery: MessageDelivery, *, keys: Sequence[str]) -> InboxItem | None:
            calls.append(keys)
            saved = await save(delivery, keys=keys)
            if len(calls) == 1:  # the intake's: committed, answered late
                await answer.wait()
            return saved

        monkeypatch.setattr(inbox, "save_message", late)
        bot.llm.reply_text("Disk is fine.")
        response = await bot.event(_mention("EvLATE"))
        assert response.status_code == 200
        assert len(calls) == 2  # the listener saved too: seen before
        answer.set()
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert len(bot.llm.requests) == 1
        assert [(k, s) for k, s, _ in _inbox(tmp_path / "opsgate.db")] == [("message", "done")]


async def test_a_burst_right_after_the_start_asks_slack_auth_test_once(tmp_path: Path) -> None:
    """Bolt's single-workspace authorization asks `auth.test` for every request until one has
    answered: asked once at start-up instead, a first burst does not ask it once per request."""
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        assert len(bot.slack.calls_to("auth.test")) == 1  # at start-up, before any request
        for n in range(10):
            bot.llm.reply_text(f"Answer {n}.")
        responses = await asyncio.gather(
            *(bot.event(_mention(f"EvBURST{n}", ts=f"17000001{n:02d}.000100")) for n in range(10))
        )
        assert [r.status_code for r in responses] == [200] * 10
        await bot.llm.wait_for_requests(10)
        await bot.settle()
        assert len(bot.slack.calls_to("auth.test")) == 1


async def test_the_message_listeners_are_the_first_bolt_tries(tmp_path: Path) -> None:
    """Bolt runs every earlier listener's matchers for each request: mentions, the requests that
    come in bursts, run none but their own."""
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        assert bot.app is not None
        first = [listener.ack_function.__qualname__ for listener in bot.app._async_listeners[:2]]
        assert first == ["Messages.incoming", "Messages.incoming"]
