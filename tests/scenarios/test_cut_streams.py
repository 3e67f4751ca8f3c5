"""A stream cut off for good is finished from the outbox: when `chat.appendStream`
keeps failing with a real error, the streamed message is taken over by `chat.update` (its text
is never shown twice), and when the answer's last write fails too, the outbox's sender, holding
the answer's ending, completes it: the thread shows the whole answer exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.slack.streaming import MORE_IN_FILE
from tests.support.harness import running_bot

LAST_WRITES = ("chat.update", "chat.postMessage")


def answer(words: int) -> str:
    return " ".join(f"word{i}" for i in range(words))


def shown(messages: list[dict[str, Any]], root: str) -> list[dict[str, Any]]:
    """The thread's messages that show the answer, in order."""
    return [m for m in messages if m.get("thread_ts") == root and "word" in str(m.get("text"))]


async def test_appends_failing_for_good_leave_the_answer_to_the_outbox(tmp_path: Path) -> None:
    text = answer(1000)  # about 7,900 characters: three posted messages once streaming is off
    async with running_bot(tmp_path) as bot:
        bot.slack.fail_next("chat.appendStream", error="internal_error", times=100)
        # The answer's last write (the one with its feedback buttons) fails once as well.
        for method in LAST_WRITES:  # an edit of its message, or a post when it had not begun
            bot.slack.fail_next(method, error="internal_error", where=lambda p: "blocks" in p)
        bot.llm.reply_text(text, chunk_size=50)
        root = await bot.mention("tell me everything")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        [started] = [c for c in bot.slack.calls_to("chat.startStream") if c.ok]
        assert [c.ok for c in bot.slack.calls_to("chat.appendStream")] == [False]
        messages = shown(bot.slack.messages, root)
        assert messages[0]["ts"] == started.response["ts"]  # the cut-off stream, taken over
        assert " ".join(str(m["text"]) for m in messages).split() == text.split()
        finals = [c for c in bot.slack.calls if c.method in LAST_WRITES and "blocks" in c.params]
        assert [c.ok for c in finals] == [False, True]  # refused, then sent by the outbox
        last = bot.slack.message(str(finals[-1].params["channel"]), str(finals[-1].response["ts"]))
        assert last is not None and any(b["type"] == "context_actions" for b in last["blocks"])
        assert (await bot.deps.store.outbox_stats()).depth == {}
        assert bot.service.ctx.output.outbox.dropped == {}  # type: ignore[attr-defined]


async def test_a_healthy_stream_leaves_nothing_in_the_outbox(tmp_path: Path) -> None:
    text = answer(600)
    async with running_bot(tmp_path) as bot:
        bot.llm.reply_text(text, chunk_size=50)
        root = await bot.mention("tell me everything")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        [message] = shown(bot.slack.messages, root)
        assert str(message["text"]).split() == text.split()
        assert [c.ok for c in bot.slack.calls_to("chat.stopStream")] == [True]
        assert [c for c in bot.slack.calls_to("chat.update") if "word" in str(c.params)] == []
        assert (await bot.deps.store.outbox_stats()).depth == {}


async def test_refused_closing_blocks_still_leave_the_whole_text(tmp_path: Path) -> None:
    text = answer(300)
    async with running_bot(tmp_path) as bot:
        bot.slack.set_streaming_supported(False)
        bot.slack.fail_next("chat.update", error="invalid_blocks", where=lambda p: "blocks" in p)
        bot.llm.reply_text(text, chunk_size=50)
        root = await bot.mention("tell me everything")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        [message] = shown(bot.slack.messages, root)
        assert str(message["text"]).split() == text.split()
        with_blocks = [c.ok for c in bot.slack.calls_to("chat.update") if "blocks" in c.params]
        assert with_blocks == [False]  # refused; the text went again without them
        assert (await bot.deps.store.outbox_stats()).depth == {}
        assert bot.service.ctx.output.outbox.dropped == {}  # type: ignore[attr-defined]


async def test_a_huge_cut_off_answer_keeps_the_cap_and_its_file(tmp_path: Path) -> None:
    text = answer(12_000)  # about 100,000 characters
    async with running_bot(tmp_path) as bot:
        bot.slack.fail_next("chat.appendStream", error="internal_error", times=1000)
        bot.llm.reply_text(text, chunk_size=400)
        root = await bot.mention("dump it all")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        messages = shown(bot.slack.messages, root)
        assert len(messages) == 5
        words = " ".join(str(m["text"]) for m in messages).split()
        assert words[-1] == "file._"  # the note that the rest is in the file
        note = len(MORE_IN_FILE.split())
        assert words[:-note] == text.split()[: len(words) - note]  # a prefix, nothing twice
        (file,) = bot.slack.uploaded_files
        assert file.text == text
        assert (await bot.deps.store.outbox_stats()).depth == {}
