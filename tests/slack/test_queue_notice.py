"""The channel's one "queued" notice counts what the store holds (issue 20): with replicas, a
run another process started still moves this process's notice the next time it sees the
channel, and the burst ends when the store's queue is empty."""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.runs.notices import Queued
from bot.runs.output import Thread
from bot.slack.queue_notice import QueueNotices
from tests.support.slack_api import SlackAPIStandIn


async def test_the_notice_draws_the_stores_count_and_ends_with_it() -> None:
    depth = {"C1": 3}

    async def count(channel: str) -> int:
        return depth[channel]

    async with SlackAPIStandIn() as slack:
        notices = QueueNotices(AsyncWebClient(token="xoxb-test", base_url=slack.url), None, count)
        mine = Thread("T1", "C1", "1700000000.000100")
        await notices.queued(mine, Queued(limit=1, ahead=2))
        [post] = slack.calls_to("chat.postMessage")
        assert "3 requests are waiting" in str(post.params["text"])
        depth["C1"] = 0  # another replica started them all
        await notices.started(Thread("T1", "C1", "1700000000.000900"))  # not one queued here
        [redraw] = slack.calls_to("chat.update")
        assert redraw.params["ts"] == post.response["ts"]
        assert "queue of this channel is empty" in str(redraw.params["text"])
        await notices.queued(mine, Queued(limit=1, ahead=0))  # started meanwhile: nothing
        assert len(slack.calls_to("chat.postMessage")) == 1
        depth["C1"] = 1
        await notices.queued(mine, Queued(limit=1, ahead=0))  # a new burst: a new notice
        assert len(slack.calls_to("chat.postMessage")) == 2
