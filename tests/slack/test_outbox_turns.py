"""The workspace-wide buckets go to what a person waits for: while `chat.update`'s bucket is
short (a storm), a notice's edit lets a card's redraw put after it take the next call, and an
edit (a card's, a notice's) a newer row of its key replaced while it waited is never sent.
Through the paced client against the stand-in; the pacer's clock moves only when the test
says, so "short" lasts exactly as long as the test needs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbox import CARD, NOTICE, SlackOutbox
from bot.slack.pacing import Pacer
from bot.slack.turns import CARD_SETTLE, RUNS_NEXT
from bot.store import OutboxEntry, SQLiteStore, Store
from tests.support.harness import paced_client
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import ManualClock

TOKEN = "xoxb-test-token"
BURST = 9
"""`chat.update` calls the pacer spends at once (Tier 3's 10, the last held: `START_SKEW`)."""


@pytest.fixture
async def slack() -> AsyncIterator[SlackAPIStandIn]:
    async with SlackAPIStandIn() as standin:
        yield standin


@contextlib.asynccontextmanager
async def sender(
    store: Store, slack: SlackAPIStandIn, clock: ManualClock
) -> AsyncIterator[SlackOutbox]:
    web = paced_client(slack, Pacer(clock=clock))
    outbox = SlackOutbox(store, web, claimer="local", poll=0.05)
    task = asyncio.create_task(outbox.run())
    try:
        yield outbox
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def until(ready: Callable[[], bool], what: str) -> None:
    """Until `ready()` (rows claimed and waiting for the bucket), looked at every 10 ms for up
    to 10 s: the pacer's clock stands still meanwhile, so no call or other event marks it."""
    for _ in range(1000):
        if ready():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {what}")


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
    clock, notes = ManualClock(), BURST + 6
    where = await messages(slack, notes + 3)
    async with SQLiteStore(tmp_path / "opsgate.db") as store, sender(store, slack, clock) as outbox:
        await outbox.put([edit(where[i], f"notice {i}", NOTICE, f"q:{i}") for i in range(notes)])
        await slack.wait_for("chat.update", count=BURST, timeout=10)  # the rest find it short
        cards = [edit(where[notes + i], f"card {i}", CARD, f"card:{i}") for i in range(3)]
        await outbox.put(cards)
        waits = notes - BURST + 3
        # Each waits in flight for its turn, or put back until its bucket can take it.
        await until(lambda: len(outbox._inflight) + len(outbox._later) == waits, f"{waits} wait")
        clock.advance(60)  # the bucket refills
        await asyncio.wait_for(outbox.wait_idle(), 30)
    order = applied(slack)
    assert sorted(order) == sorted(
        [f"notice {i}" for i in range(notes)] + ["card 0", "card 1", "card 2"]
    )
    assert {order.index(f"card {i}") for i in range(3)} == {BURST, BURST + 1, BURST + 2}, order


@pytest.mark.parametrize("priority", [CARD, NOTICE], ids=["card", "notice"])
async def test_an_edit_superseded_while_it_waited_for_the_bucket_is_never_sent(
    slack: SlackAPIStandIn, tmp_path: Path, priority: int
) -> None:
    """A card's redraw after its decision, still waiting when the call's result owed the next:
    one `chat.update`, of the latest; a queued notice's edit likewise."""
    clock = ManualClock()
    where = await messages(slack, BURST + 1)
    async with SQLiteStore(tmp_path / "opsgate.db") as store, sender(store, slack, clock) as outbox:
        await outbox.put([edit(where[i], f"fill {i}", NOTICE, f"q:{i}") for i in range(BURST)])
        await slack.wait_for("chat.update", count=BURST, timeout=10)  # the bucket is short
        [stale] = await store.put_outbox([edit(where[-1], "stale", priority, "queue:C1")])
        outbox.wake()
        await until(lambda: stale in outbox._inflight.values(), "the stale row claimed")
        await outbox.put([edit(where[-1], "latest", priority, "queue:C1")])
        clock.advance(60)
        await asyncio.wait_for(outbox.wait_idle(), 30)
        assert (await store.outbox_stats()).depth == {}
    sent = applied(slack)
    assert "latest" in sent
    assert "stale" not in sent
    assert outbox.dropped == {}


def runs_next(where: tuple[str, str], text: str) -> OutboxEntry:
    """A card's redraw after its approval, the call not run yet (`bot.slack.redraws`)."""
    channel, ts = where
    params = {"channel": channel, "ts": ts, "text": text}
    meta = {RUNS_NEXT: True}
    return OutboxEntry("chat.update", params, CARD, channel_id=channel, key="card:1", meta=meta)


async def test_in_a_storm_an_approved_cards_redraw_waits_for_its_result_one_edit_shows_both(
    slack: SlackAPIStandIn, tmp_path: Path
) -> None:
    """`chat.update` is being spent (not short): the redraw after the approval settles, the
    result's redraw supersedes it, and the card is edited once."""
    clock = ManualClock()
    where = await messages(slack, 3)
    async with SQLiteStore(tmp_path / "opsgate.db") as store, sender(store, slack, clock) as outbox:
        await outbox.put([edit(where[i], f"fill {i}", NOTICE, f"q:{i}") for i in range(2)])
        await slack.wait_for("chat.update", count=2, timeout=10)  # being spent, not short
        [approved] = await store.put_outbox([runs_next(where[2], "approved")])
        outbox.wake()
        await until(lambda: approved in outbox._inflight.values(), "the redraw claimed")
        await asyncio.sleep(0.3)  # the call runs meanwhile
        await outbox.put([edit(where[2], "ran", CARD, "card:1")])
        await asyncio.wait_for(outbox.wait_idle(), 30)
    assert sorted(applied(slack)) == ["fill 0", "fill 1", "ran"]


async def test_outside_a_storm_an_approved_cards_redraw_goes_at_once(
    slack: SlackAPIStandIn, tmp_path: Path
) -> None:
    clock = ManualClock()
    [where] = await messages(slack, 1)
    async with SQLiteStore(tmp_path / "opsgate.db") as store, sender(store, slack, clock) as outbox:
        await outbox.put([runs_next(where, "approved")])
        await slack.wait_for("chat.update", count=1, timeout=CARD_SETTLE / 2)
    assert applied(slack) == ["approved"]
