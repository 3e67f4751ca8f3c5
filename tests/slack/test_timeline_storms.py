"""A timeline in a storm: while the workspace-wide bucket its first write spends is short, a run
that ends within a few seconds shows no timeline at all, a timeline whose every task waits for
approval is not started (nor outside a storm once each card is linked: the cards show those),
and a longer run's timeline is shown once its
grace is over; an edited timeline is edited at most once per few seconds, its last edit never
held. Against the stand-in that enforces Slack's tiers, through the paced client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.runs.output import Thread
from bot.runs.timeline import Task
from bot.slack.app import CountingWebClient
from bot.slack.pacing import Pacer
from bot.slack.timeline import STORM_EDIT_EVERY, STORM_GRACE, SlackTimeline
from tests.support.harness import paced_client
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_ratelimits import RateLimits

SPEED = 4.0
THREAD = Thread("T1", "C1", "1700000000.000100")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def slack() -> AsyncIterator[SlackAPIStandIn]:
    async with SlackAPIStandIn(rate_limits=RateLimits(speed=SPEED)) as standin:
        yield standin


def paced(slack: SlackAPIStandIn) -> CountingWebClient:
    return paced_client(slack, Pacer(speed=SPEED))


async def storm(client: CountingWebClient, method: str) -> None:
    """Spend `method`'s bucket, as a storm's other runs would have."""
    while not client.pacer.short(method):
        await client.pacer.take(method)


def timeline(client: CountingWebClient, clock: Clock, *, streaming: bool = True) -> SlackTimeline:
    return SlackTimeline(
        client, THREAD, recipient_user_id="U0ALICE" if streaming else None, clock=clock
    )


def calls(slack: SlackAPIStandIn, *methods: str) -> int:
    return sum(len(slack.calls_to(m)) for m in methods)


SHOWN = ("chat.startStream", "chat.postMessage", "chat.update", "chat.appendStream")


async def test_a_short_run_in_a_storm_shows_no_timeline(slack: SlackAPIStandIn) -> None:
    client, clock = paced(slack), Clock()
    await storm(client, "chat.startStream")
    line = timeline(client, clock)
    await line.show(Task("call_1", "run_command", '{"command": "uptime"}', "in_progress"))
    await line.flush()
    await line.show(Task("call_1", "run_command", '{"command": "uptime"}', "complete"))
    await line.rest()
    clock.now += STORM_GRACE / 2
    await line.close()
    assert calls(slack, *SHOWN, "chat.stopStream") == 0


async def test_without_a_storm_the_same_run_shows_its_timeline(slack: SlackAPIStandIn) -> None:
    client, clock = paced(slack), Clock()
    line = timeline(client, clock)
    await line.show(Task("call_1", "run_command", '{"command": "uptime"}', "in_progress"))
    await line.flush()
    await line.close()
    assert calls(slack, "chat.startStream") == calls(slack, "chat.stopStream") == 1


async def test_a_longer_run_in_a_storm_is_shown_once_its_grace_is_over(
    slack: SlackAPIStandIn,
) -> None:
    client, clock = paced(slack), Clock()
    await storm(client, "chat.startStream")
    line = timeline(client, clock)
    await line.show(Task("call_1", "run_command", '{"command": "sleep 9"}', "in_progress"))
    await line.flush()
    assert calls(slack, *SHOWN) == 0
    clock.now += STORM_GRACE + 1
    await line.show(Task("call_2", "run_command", '{"command": "uptime"}', "in_progress"))
    await line.flush()  # waits its turn at the bucket, then starts the stream with both tasks
    [start] = slack.calls_to("chat.startStream")
    assert [c["id"] for c in start.params["chunks"]] == ["call_1", "call_2"]
    await line.close()
    assert calls(slack, "chat.stopStream") == 1


async def test_a_timeline_of_calls_waiting_for_approval_is_not_started_in_a_storm(
    slack: SlackAPIStandIn,
) -> None:
    client, clock = paced(slack), Clock()
    await storm(client, "chat.startStream")
    line = timeline(client, clock)
    clock.now += STORM_GRACE + 1  # the model took its time: the card says the rest
    link = "https://example.slack.com/archives/C1/p1"
    await line.show(Task("call_1", "run_command", "{}", "waiting", (0, 1), link))
    await line.rest()
    await line.close()  # the resume: its own timeline and answer follow
    assert calls(slack, *SHOWN, "chat.stopStream") == 0


async def test_a_timeline_of_calls_waiting_for_approval_is_not_started_while_streams_are_spent(
    slack: SlackAPIStandIn,
) -> None:
    """Not short yet, but other runs' streams just started (a storm's runs pausing at once):
    shown, it would cost an edit more at the resume, to say what its cards say. (One stream is
    what a run spends itself before its pause: `test_one_stream_spent_is_not_a_storm`.)"""
    client, clock = paced(slack), Clock()
    await client.pacer.take("chat.startStream")
    await client.pacer.take("chat.startStream")
    assert not client.pacer.short("chat.startStream")
    line = timeline(client, clock)
    clock.now += STORM_GRACE + 1
    link = "https://example.slack.com/archives/C1/p1"
    await line.show(Task("call_1", "run_command", "{}", "waiting", (0, 1), link))
    await line.rest()
    await line.show(Task("call_1", "run_command", "{}", "approved", decided_by="U0BOB"))
    await line.close()
    assert calls(slack, *SHOWN, "chat.stopStream") == 0


async def test_one_stream_spent_is_not_a_storm(slack: SlackAPIStandIn) -> None:
    """A run that said a word before its call has spent a stream itself (tried even where Slack
    refuses streaming): its paused timeline is still shown (a call whose card could not be
    linked: the timeline is where the thread says it waits)."""
    client, clock = paced(slack), Clock()
    await client.pacer.take("chat.startStream")
    line = timeline(client, clock)
    clock.now += STORM_GRACE + 1
    await line.show(Task("call_1", "run_command", "{}", "waiting", (0, 1)))
    await line.rest()
    assert calls(slack, *SHOWN) >= 1


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "fallback"])
async def test_calls_each_waiting_on_its_card_show_no_timeline(
    slack: SlackAPIStandIn, streaming: bool
) -> None:
    """Outside any storm too: the cards say all a timeline would, and a timeline shown at the
    pause would cost an edit at the resume (Tier 3) to say what the redrawn cards say. One that
    ends so is never shown; a task that runs is."""
    client, clock = paced(slack), Clock()
    clock.now += STORM_GRACE + 1
    line = timeline(client, clock, streaming=streaming)
    link = "https://example.slack.com/archives/C1/p1"
    await line.show(Task("call_1", "run_command", "{}", "waiting", (0, 1), link))
    await line.show(Task("call_2", "run_command", "{}", "waiting", (0, 1), link))
    await line.rest()
    await line.close()
    assert calls(slack, *SHOWN) == 0
    line = timeline(client, clock, streaming=streaming)
    await line.show(Task("call_1", "run_command", "{}", "waiting", (0, 1), link))
    await line.show(Task("call_2", "echo", "{}", "in_progress"))
    await line.flush()
    assert calls(slack, *SHOWN) == 1


async def test_an_edited_timeline_in_a_storm_is_edited_once_per_few_seconds(
    slack: SlackAPIStandIn,
) -> None:
    client, clock = paced(slack), Clock()
    line = timeline(client, clock, streaming=False)
    await line.show(Task("call_1", "run_command", "{}", "in_progress"))
    await line.flush()  # no storm yet: posted
    assert calls(slack, "chat.postMessage") == 1
    await storm(client, "chat.update")
    clock.now += STORM_EDIT_EVERY / 3
    await line.show(Task("call_1", "run_command", "{}", "complete"))
    await line.show(Task("call_2", "run_command", "{}", "in_progress"))
    await line.flush()
    assert calls(slack, "chat.update") == 0  # joins the next edit
    clock.now += STORM_EDIT_EVERY
    await line.show(Task("call_2", "run_command", "{}", "complete"))
    await line.close()  # its last edit is never held: both tasks as they ended
    [update] = slack.calls_to("chat.update")
    text = str(update.params["blocks"])
    assert text.count("✅") == 2
