"""Streaming answers under Slack's limits: an answer streams only while a stream slot is free
(else it is posted whole), an answer takes at most five messages (the
whole of it attached as a file) on every path, streaming or post-and-edit, and a 429 on
`chat.startStream` is waited out instead of turning streaming off."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from bot.slack.endings import Ending, finish_answer
from bot.slack.pacing import Pacer
from bot.slack.streaming import FIRST_HOLD, MAX_MESSAGES, ThreadReply
from tests.support.harness import paced_client
from tests.support.slack_api import SlackAPIStandIn

PIECE = "word " * 400  # 2,000 characters


@pytest.fixture
async def slack() -> AsyncIterator[SlackAPIStandIn]:
    async with SlackAPIStandIn() as standin:
        yield standin


def reply(slack: SlackAPIStandIn, *, person: str | None) -> ThreadReply:
    client = paced_client(slack, Pacer(speed=1000.0))
    return ThreadReply(
        client,
        channel="C1",
        thread_ts="1700000000.000100",
        recipient_user_id=person,
        recipient_team_id="T1",
    )


def messages(slack: SlackAPIStandIn) -> int:
    posted = [c for c in slack.calls_to("chat.postMessage") if c.ok]
    started = [c for c in slack.calls_to("chat.startStream") if c.ok]
    return len(posted) + len(started)


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming falls back", "posted"])
async def test_a_huge_answer_is_five_messages_and_a_file_on_every_path(
    slack: SlackAPIStandIn, streaming: bool
) -> None:
    slack.set_streaming_supported(not streaming)  # the fallback path: streaming refused
    answer = reply(slack, person="UREQ" if streaming else None)
    for _ in range(100):  # 200,000 characters
        await answer.append(PIECE)
    await answer.close()
    assert messages(slack) <= MAX_MESSAGES
    [upload] = [c for c in slack.calls_to("files.completeUploadExternal") if c.ok]
    assert upload


async def test_the_cap_holds_when_stopping_a_stream_fails(slack: SlackAPIStandIn) -> None:
    slack.fail_next("chat.stopStream", error="internal_error", times=10)
    answer = reply(slack, person="UREQ")
    for _ in range(100):
        await answer.append(PIECE)
    await answer.close()
    assert messages(slack) <= MAX_MESSAGES
    assert [c for c in slack.calls_to("files.completeUploadExternal") if c.ok]


async def test_a_429_on_start_stream_waits_and_streams(slack: SlackAPIStandIn) -> None:
    slack.fail_next("chat.startStream", status=429, retry_after=0, times=2)
    answer = reply(slack, person="UREQ")
    await answer.append("All checks passed.")
    await answer.close()
    assert [c.ok for c in slack.calls_to("chat.startStream")] == [False, False, True]
    assert [c for c in slack.calls_to("chat.postMessage") if c.ok] == []


async def appended(
    slack: SlackAPIStandIn,
    pieces: int,
    *,
    short: Callable[[str], bool] | None = None,
    spent: Callable[[str], bool] | None = None,
) -> int:
    """The appends of an answer of `pieces` × 1,000 characters written at once."""
    answer = reply(slack, person="UREQ")
    answer.short, answer.spent = short, spent
    for _ in range(pieces):
        await answer.append("word " * 200)
    await answer.close()
    return len([c for c in slack.calls_to("chat.appendStream") if c.ok])


@pytest.mark.parametrize(("short", "most"), [(False, 12), (True, 4)], ids=["free", "short"])
async def test_appends_grow_while_the_bucket_is_short(
    slack: SlackAPIStandIn, short: bool, most: int
) -> None:
    appends = await appended(slack, 20, short=lambda method: short)
    assert appends <= most
    assert short or appends >= 8


@pytest.mark.parametrize("spent", [False, True], ids=["quiet", "storm"])
async def test_while_appends_are_spent_a_fast_answer_goes_in_fewer_pieces(
    slack: SlackAPIStandIn, spent: bool
) -> None:
    """10,000 characters at once (a command's output): every 2,000 characters an append, but
    while `chat.appendStream` (Tier 4, the workspace's) is being spent, one piece a second."""
    assert await appended(slack, 10, spent=lambda method: spent) == (0 if spent else 4)
    assert [c.method for c in slack.calls if c.ok][-1] == "chat.stopStream"


async def test_a_stream_whose_appends_fail_is_taken_over_not_repeated(
    slack: SlackAPIStandIn,
) -> None:
    slack.fail_next("chat.appendStream", error="internal_error", times=50)
    answer = reply(slack, person="UREQ")
    for _ in range(4):  # 8,000 characters
        await answer.append(PIECE)
    await answer.close()
    [started] = [c for c in slack.calls_to("chat.startStream") if c.ok]
    shown = [m for m in slack.messages if "word" in str(m["text"])]
    assert shown[0]["ts"] == started.response["ts"]  # edited in place, not posted again
    assert " ".join(str(m["text"]) for m in shown).split() == (PIECE * 4).split()
    assert messages(slack) <= MAX_MESSAGES


class Keeper:
    """An `AnswerKeeper` in memory: what the outbox does with an answer's ending."""

    def __init__(self) -> None:
        self.endings: list[Ending] = []
        self.released = 0

    async def keep(self, ending: Ending) -> str | None:
        self.endings.append(ending)
        return str(len(self.endings))

    async def kept(self, row_id: str) -> None:
        return None

    async def release(self, row_id: str) -> None:
        self.released += 1


def slots(*free: bool, then: bool = False) -> Callable[[], Awaitable[bool]]:
    """Whether a stream slot is free, for each stream in turn (`free`), then `then`."""
    given = iter(free)

    async def slot() -> bool:
        return next(given, then)

    return slot


def slotted(slack: SlackAPIStandIn, free: bool) -> ThreadReply:
    answer = reply(slack, person="UREQ")
    answer.stream_slot = slots(then=free)
    answer.keeper = Keeper()
    return answer


async def test_with_no_stream_slot_free_an_answer_is_posted_whole_once(
    slack: SlackAPIStandIn,
) -> None:
    answer = slotted(slack, free=False)
    for piece in ("Checked ", "host-1: ", "all fine."):
        await answer.append(piece)
    assert slack.calls == []  # nothing sent while it is being written
    await answer.close(blocks=[{"type": "divider"}])
    [post] = [c for c in slack.calls if c.method != "auth.test"]
    assert post.method == "chat.postMessage" and post.ok
    assert post.params["text"] == "Checked host-1: all fine."
    assert {"type": "divider"} in post.params["blocks"]


async def test_with_a_stream_slot_free_an_answer_streams(slack: SlackAPIStandIn) -> None:
    answer = slotted(slack, free=True)
    await answer.append("All checks passed.")
    await answer.close()
    assert [c.method for c in slack.calls if c.ok] == ["chat.startStream", "chat.stopStream"]


@pytest.mark.parametrize("busy", [True, False], ids=["storm", "quiet"])
async def test_while_streams_are_spent_an_answer_done_within_the_hold_is_posted(
    slack: SlackAPIStandIn, busy: bool
) -> None:
    """A stream costs two Tier 2 calls; a post, one call of its channel's own bucket."""
    now = [0.0]
    answer = slotted(slack, free=True)
    answer.clock, answer.stream_busy = (lambda: now[0]), (lambda: busy)
    await answer.append("Checked host-1: ")
    now[0] += FIRST_HOLD / 2
    await answer.append("all fine.")
    await answer.close()
    sent = [c.method for c in slack.calls if c.ok]
    if busy:
        assert sent == ["chat.postMessage"]
        assert slack.calls[-1].params["text"] == "Checked host-1: all fine."
    else:
        assert sent == ["chat.startStream", "chat.stopStream"]


async def test_while_streams_are_spent_an_answer_still_written_after_the_hold_streams(
    slack: SlackAPIStandIn,
) -> None:
    now = [0.0]
    answer = slotted(slack, free=True)
    answer.clock, answer.stream_busy = (lambda: now[0]), (lambda: True)
    await answer.append("Checking the hosts")
    assert slack.calls == []
    now[0] += FIRST_HOLD
    await answer.append(", one by one.")
    assert [c.method for c in slack.calls if c.ok] == ["chat.startStream"]
    await answer.close()
    assert [c.method for c in slack.calls if c.ok][-1] == "chat.stopStream"


async def test_a_long_answer_with_no_slot_is_posted_in_whole_messages_never_edited(
    slack: SlackAPIStandIn,
) -> None:
    answer = slotted(slack, free=False)
    for _ in range(100):  # 200,000 characters
        await answer.append(PIECE)
    await answer.close()
    methods = Counter(c.method for c in slack.calls if c.ok)
    assert methods["chat.postMessage"] == MAX_MESSAGES
    assert methods["chat.update"] == 0 and methods["chat.startStream"] == 0
    assert methods["files.completeUploadExternal"] == 1


async def test_each_message_of_a_long_answer_streams_only_with_a_slot_of_its_own(
    slack: SlackAPIStandIn,
) -> None:
    """The first message took the last slot: the next one of the answer is posted whole, not
    a second stream that would queue behind the workspace's `chat.startStream` budget."""
    answer = slotted(slack, free=True)
    answer.stream_slot = slots(True)
    text = "Line of the long answer. " * 1000  # 25,000 characters: three messages
    for i in range(0, len(text), 400):
        await answer.append(text[i : i + 400])
    await answer.close()
    methods = Counter(c.method for c in slack.calls if c.ok)
    assert methods["chat.startStream"] == 1 and methods["chat.stopStream"] == 1
    assert methods["chat.postMessage"] == 2 and methods["chat.update"] == 0
    shown = "".join(str(m.get("text")) for m in slack.messages).replace("\n", "")
    assert shown.count("Line of the long answer.") == 1000


async def test_an_ending_posted_whole_and_sent_again_shows_once(slack: SlackAPIStandIn) -> None:
    """A replica died after posting an answer whole, before its row was done: the sender that
    finishes the row finds the message by its mark and redraws it."""
    client = reply(slack, person="UREQ").client
    ending = Ending("C1", "1700000000.000100", None, "All checks passed.", mark="m1")
    await finish_answer(client, ending.params())
    await finish_answer(client, ending.params(), retried=True)
    shown = [m for m in slack.messages if "All checks passed." in str(m.get("text"))]
    assert len(shown) == 1
    assert [c.ok for c in slack.calls_to("chat.update")] == [True]


async def test_an_ending_never_posted_is_posted_when_sent_again(slack: SlackAPIStandIn) -> None:
    """The replica that kept it died before posting: the thread has nothing of it (Slack may
    even say the thread is not found), and the sender posts it."""
    client = reply(slack, person="UREQ").client
    ending = Ending("C1", "1700000000.000100", None, "All checks passed.", mark="m1")
    await finish_answer(client, ending.params(), retried=True)
    shown = [m for m in slack.messages if "All checks passed." in str(m.get("text"))]
    assert len(shown) == 1
