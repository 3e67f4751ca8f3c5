"""The workspace-wide buckets go to what a person waits for: while `chat.update`'s bucket is
short (a storm), a notice's edit lets a card's redraw put after it take the next call, and an
edit a newer row of its key replaced while it waited is never sent. Against the stand-in that
enforces Slack's tiers, through the paced client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.app import CountingWebClient
from bot.slack.outbox import CARD, NOTICE, SlackOutbox
from bot.slack.pacing import Pacer
from bot.store import OutboxEntry, SQLiteStore, Store
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits

TOKEN = "xoxb-test-token"
SPEED = 4.0
"""Slow enough that a refilled `chat.update` token comes a few hundred ms apart."""
BURST = 9
"""`chat.update` calls the pacer spends at once (Tier 3's 10, one kept back)."""


@pytest.fixture
async def slack() -> AsyncIterator[SlackAPIStandIn]:
    async with SlackAPIStandIn(rate_limits=RateLimits(speed=SPEED)) as standin:
        yield standin


@contextlib.asynccontextmanager
async def sender(store: Store, slack: SlackAPIStandIn) -> AsyncIterator[SlackOutbox]:
    web = CountingWebClient(
        on_error=lambda method: None,
        pacer=Pacer(speed=SPEED),
        token=TOKEN,
        base_url=slack.url,
        retry_handlers=[],
    )
    outbox = SlackOutbox(store, web, claimer="local", poll=0.05)
    task = asyncio.create_task(outbox.run())
    try:
        yield outbox
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def messages(slack: SlackAPIStandIn, n: int) -> list[tuple[str, str]]:
    """`n` messages to edit, one per channel (each channel's own post bucket)."""
    web = AsyncWebClient(token=TOKEN, base_url=slack.url)
    out = []
    for i in range(n):
        posted = await web.chat_postMessage(channel=f"C{i:02d}", text="before")
        out.append((f"C{i:02d}", str(posted["ts"])))
    return out


def edit(where: tuple[str, str], text: str, priority: int, key: str) -> OutboxEntry:
    channel, ts = where
    params = {"channel": channel, "ts": ts, "text": text}
    return OutboxEntry("chat.update", params, priority, channel_id=channel, key=key)


def applied(slack: SlackAPIStandIn) -> list[str]:
    return [str(c.params["text"]) for c in slack.calls_to("chat.update") if c.ok]


async def test_a_cards_redraw_goes_before_the_notice_edits_waiting_for_the_bucket(
    slack: SlackAPIStandIn, tmp_path: Path
) -> None:
    notes = BURST + 6
    where = await messages(slack, notes + 3)
    async with SQLiteStore(tmp_path / "opsgate.db") as store, sender(store, slack) as outbox:
        await outbox.put([edit(where[i], f"notice {i}", NOTICE, f"q:{i}") for i in range(notes)])
        await slack.wait_for("chat.update", count=BURST, timeout=10)
        cards = [edit(where[notes + i], f"card {i}", CARD, f"card:{i}") for i in range(3)]
        await outbox.put(cards)
        await asyncio.wait_for(outbox.wait_idle(), 30)
    order = applied(slack)
    assert sorted(order) == sorted(
        [f"notice {i}" for i in range(notes)] + ["card 0", "card 1", "card 2"]
    )
    last_card = max(order.index(f"card {i}") for i in range(3))
    # The six notices that found the bucket short let the three cards go first (all of them
    # at most one refill late: a notice may have been taking a token as they were put).
    assert last_card <= BURST + 3, order


async def test_an_edit_superseded_while_it_waited_for_the_bucket_is_never_sent(
    slack: SlackAPIStandIn, tmp_path: Path
) -> None:
    where = await messages(slack, BURST + 2)
    async with SQLiteStore(tmp_path / "opsgate.db") as store, sender(store, slack) as outbox:
        fill = [edit(where[i], f"fill {i}", NOTICE, f"q:{i}") for i in range(BURST + 1)]
        await outbox.put(fill)
        await slack.wait_for("chat.update", count=BURST, timeout=10)
        [stale] = await store.put_outbox([edit(where[-1], "stale count", NOTICE, "queue:C1")])
        outbox.wake()
        await slack.wait_until(lambda: stale in outbox._inflight.values(), timeout=10)
        await outbox.put([edit(where[-1], "latest count", NOTICE, "queue:C1")])
        await asyncio.wait_for(outbox.wait_idle(), 30)
        assert (await store.outbox_stats()).depth == {}
    sent = applied(slack)
    assert "latest count" in sent
    assert "stale count" not in sent
    assert outbox.dropped == {}
