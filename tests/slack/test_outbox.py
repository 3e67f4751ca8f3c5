"""The durable sender: writes stored in the outbox reach Slack once each, cards'
redraws first, superseded ones merged, through the paced client against the stand-in that
enforces Slack's tiers; what one process left is sent by the next; real errors are dropped
(and counted) at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.runs.notices import StillWorking
from bot.runs.output import Thread
from bot.runs.views import CardCall, CardDrawing, CardOutcome, CardRef
from bot.slack.app import CountingWebClient
from bot.slack.cards import card_renderer
from bot.slack.outbox import SlackOutbox
from bot.slack.output import SlackThreadOutput
from bot.slack.pacing import Pacer
from bot.slack.queue_notice import QueueNotices
from bot.store import CARD_REDRAW, SQLiteStore
from tests.support.harness import paced_client
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits

SPEED = 20.0
THREAD = Thread("T1", "C1", "1700000000.000100")


@pytest.fixture
async def slack() -> AsyncIterator[SlackAPIStandIn]:
    async with SlackAPIStandIn(rate_limits=RateLimits(speed=SPEED)) as standin:
        yield standin


def client(slack: SlackAPIStandIn) -> CountingWebClient:
    return paced_client(slack, Pacer(speed=SPEED))


@contextlib.asynccontextmanager
async def sending(outbox: SlackOutbox) -> AsyncIterator[SlackOutbox]:
    task = asyncio.create_task(outbox.run())
    try:
        yield outbox
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def card(ledger_id: str) -> CardCall:
    return CardCall(
        ledger_id=ledger_id,
        tool="run_command",
        description="",
        arguments={"command": "uptime"},
        digest="d" * 64,
        requested_by="UREQ",
        call_id="call_1",
    )


async def test_a_storm_reaches_slack_whole_once_and_unrefused(
    slack: SlackAPIStandIn, tmp_path: Path
) -> None:
    async with SQLiteStore(tmp_path / "opsgate.db") as store:
        outbox = SlackOutbox(store, client(slack), claimer="local", poll=0.05)
        output = SlackThreadOutput(outbox.client, outbox, QueueNotices(outbox, store))
        threads = [Thread("T1", f"C{i % 4}", f"17000000{i:02d}.000100") for i in range(12)]
        await asyncio.gather(*(output.say(t, StillWorking()) for t in threads))
        await asyncio.gather(*(output.react(t, t.thread_ts, True) for t in threads))
        async with sending(outbox):
            await asyncio.wait_for(outbox.wait_idle(), 20)
        assert slack.rate_limits is not None
        assert sum(slack.rate_limits.refused.values()) <= 2
        posts = [c for c in slack.calls_to("chat.postMessage") if c.ok]
        assert sorted(str(c.params["thread_ts"]) for c in posts) == sorted(
            t.thread_ts for t in threads
        )
        # 👀 as far as Tier 3 could take them within a second; the others go without.
        added = len([c for c in slack.calls_to("reactions.add") if c.ok])
        assert added + len(output.unmarked) == 12 and added >= 9
        assert outbox.dropped == {}


async def test_only_the_latest_redraw_is_sent_and_cancelled_reactions_never(
    slack: SlackAPIStandIn, tmp_path: Path
) -> None:
    async with SQLiteStore(tmp_path / "opsgate.db") as store:
        web = client(slack)
        posted = await web.chat_postMessage(channel="C1", text="card")
        ref = CardRef("C1", str(posted["ts"]))
        now: list[CardDrawing] = []  # the call's state as the sender finds it

        async def draw(_ledger_id: str) -> CardDrawing | None:
            return now[-1]

        async def drawn(_ledger_id: str, _state: str) -> None:
            return None

        renderers = {CARD_REDRAW: card_renderer(draw, drawn)}
        outbox = SlackOutbox(store, web, claimer="local", poll=0.05, renderers=renderers)
        output = SlackThreadOutput(web, outbox, QueueNotices(outbox, store))
        now.append(CardDrawing(ref, card("L1"), None, "pending"))
        await output.update_card(ref, card("L1"), None)
        decided = CardOutcome(status="approved", decided_by="UBOB", decided_at=datetime.now(UTC))
        now.append(CardDrawing(ref, card("L1"), decided, "approved"))
        await output.update_card(ref, card("L1"), decided)
        await output.react(THREAD, "1.0", True)
        await output.react(THREAD, "1.0", False)
        async with sending(outbox):
            await asyncio.wait_for(outbox.wait_idle(), 10)
        [update] = slack.calls_to("chat.update")
        assert "actions" not in str(update.params.get("blocks"))
        assert slack.calls_to("reactions.add") == slack.calls_to("reactions.remove") == []


async def test_what_a_stopped_process_left_is_sent_by_the_next(
    slack: SlackAPIStandIn, tmp_path: Path
) -> None:
    db = tmp_path / "opsgate.db"
    async with SQLiteStore(db) as store:
        first = SlackOutbox(store, client(slack), claimer="local")
        output = SlackThreadOutput(first.client, first, QueueNotices(first, store))
        await output.upload(THREAD, "out.txt", "all of it")
        await store.claim_outbox("local", limit=10, lease=first.lease)  # killed mid-send
    async with SQLiteStore(db) as store:
        again = SlackOutbox(store, client(slack), claimer="local", poll=0.05)
        async with sending(again):
            await asyncio.wait_for(again.wait_idle(), 10)
    [upload] = [c for c in slack.calls_to("files.completeUploadExternal") if c.ok]
    assert upload.params


async def test_a_real_error_is_dropped_at_once_and_counted(
    slack: SlackAPIStandIn, tmp_path: Path
) -> None:
    async with SQLiteStore(tmp_path / "opsgate.db") as store:
        outbox = SlackOutbox(store, client(slack), claimer="local", poll=0.05)
        slack.fail_next("chat.postEphemeral", error="not_in_channel")
        output = SlackThreadOutput(outbox.client, outbox, QueueNotices(outbox, store))
        await output.replies.tell_mrkdwn(THREAD, "UBOB", "hi")
        async with sending(outbox):
            await asyncio.wait_for(outbox.wait_idle(), 10)
        assert len(slack.calls_to("chat.postEphemeral")) == 1
        assert outbox.dropped == {"slack_error": 1}
        assert (await store.outbox_stats()).depth == {}
