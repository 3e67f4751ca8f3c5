"""What a storm's runs cost in posts: while a channel's `chat.postMessage` budget is spent, a
command's output heads its run's next answer (one message, not two) and a message goes without
👀 (nor its removal); with budget to spend both are shown as before. Over the real outbox
(SQLite) and the Slack stand-in, the pacer's clock held still."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient

from bot.runs.notices import StillWorking, ToolRan
from bot.runs.output import Thread
from bot.slack.outbox import NOTICE, OWED_SECONDS, SlackOutbox
from bot.slack.output import SlackThreadOutput
from bot.slack.pacing import Pacer
from bot.slack.queue_notice import QueueNotices
from bot.store import OutboxEntry, SQLiteStore
from tests.support.harness import paced_client
from tests.support.slack_api import SlackAPIStandIn

THREAD = Thread("T1", "C1", "1700000000.000100")
OUTPUT = ToolRan("run_command", "call_1", "output-7")


@dataclass
class Setup:
    slack: SlackAPIStandIn
    store: SQLiteStore
    pacer: Pacer
    output: SlackThreadOutput

    def spend(self, method: str, channel: str | None = None) -> None:
        """Take every token of `method`'s bucket: a storm spent it."""
        while self.pacer.claim(method, 0.0, channel=channel):
            pass

    async def owed(self) -> int:
        return sum((await self.store.outbox_stats()).depth.values())


@asynccontextmanager
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    async with SlackAPIStandIn() as slack, SQLiteStore(tmp_path / "opsgate.db") as store:
        pacer = Pacer(clock=lambda: 0.0)
        client = paced_client(slack, pacer)
        outbox = SlackOutbox(store, client, claimer="local")
        output = SlackThreadOutput(client, outbox, QueueNotices(outbox, store))
        yield Setup(slack, store, pacer, output)


async def test_while_posts_are_spent_an_output_heads_the_next_answer(tmp_path: Path) -> None:
    async with setup(tmp_path) as s:
        s.spend("chat.postMessage", THREAD.channel_id)
        await s.output.say(THREAD, OUTPUT)
        assert await s.owed() == 0  # held, not a message of its own
        sink = s.output.stream(THREAD, "UREQ")
        await sink.append("Done: all good.")
        await sink.finish("sess_1")
        [answer] = [m for m in s.slack.messages if m.get("thread_ts") == THREAD.thread_ts]
        assert "output-7" in str(answer["text"]) and "Done: all good." in str(answer["text"])
        assert str(answer["text"]).index("output-7") < str(answer["text"]).index("Done:")


async def test_held_output_is_posted_first_when_something_else_is_said(tmp_path: Path) -> None:
    async with setup(tmp_path) as s:
        s.spend("chat.postMessage", THREAD.channel_id)
        await s.output.say(THREAD, OUTPUT)
        await s.output.say(THREAD, StillWorking())
        rows = await s.store.claim_outbox("test", limit=10, lease=timedelta(seconds=5))
        texts = [str(r.params.get("text")) for r in rows]
        assert len(texts) == 2 and "output-7" in texts[0]


async def test_with_budget_an_output_is_its_own_message(tmp_path: Path) -> None:
    async with setup(tmp_path) as s:
        await s.output.say(THREAD, OUTPUT)
        assert await s.owed() == 1


async def test_while_reactions_are_spent_a_message_goes_without_eyes(tmp_path: Path) -> None:
    async with setup(tmp_path) as s:
        await s.output.react(THREAD, "1700000000.000200", True)
        assert await s.owed() == 1  # budget to spend: marked
        s.spend("reactions.add")
        await s.output.react(THREAD, "1700000000.000300", True)
        await s.output.react(THREAD, "1700000000.000300", False)
        assert await s.owed() == 1  # neither the mark nor its removal


async def test_outputs_said_at_once_in_a_channel_post_one_message_the_rest_are_held(
    tmp_path: Path,
) -> None:
    """Runs resumed together say their outputs before any post went out (the bucket is still
    full): the first is posted, the others see the channel's posts spoken for and are held."""
    async with setup(tmp_path) as s:
        others = [Thread("T1", THREAD.channel_id, f"1700000000.00020{i}") for i in range(3)]
        for thread in [THREAD, *others]:
            await s.output.say(thread, OUTPUT)
        assert await s.owed() == 1
        elsewhere = Thread("T1", "C2", "1700000000.000300")
        await s.output.say(elsewhere, OUTPUT)  # another channel's posts are its own
        assert await s.owed() == 2


async def test_a_channels_messages_count_as_owed_there_for_a_while_only(tmp_path: Path) -> None:
    """Rows this process put may be sent by another replica, which it never hears of: after
    `OWED_SECONDS` they no longer hold the channel's outputs back."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    async with SQLiteStore(tmp_path / "opsgate.db") as store, SlackAPIStandIn() as slack:
        client = AsyncWebClient(token="xoxb-test-token", base_url=slack.url)
        outbox = SlackOutbox(store, client, claimer="local", clock=lambda: now)
        await outbox.put([OutboxEntry("chat.postMessage", {"text": "hi"}, NOTICE, channel_id="C1")])
        assert outbox.owes("C1", "1700000000.000900")  # another thread's message
        assert not outbox.owes("C2", "1700000000.000900")
        now += timedelta(seconds=OWED_SECONDS + 1)
        assert not outbox.owes("C1", "1700000000.000900")
