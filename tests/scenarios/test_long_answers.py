"""Long answers in Slack: few Web API calls while streaming, at most 5 messages, the rest a file."""

from __future__ import annotations

from pathlib import Path

from tests.support.harness import running_bot

STREAM_CALLS = ("chat.startStream", "chat.appendStream", "chat.stopStream")


def answer(chars: int) -> str:
    words = (f"word{i} " for i in range(chars))
    return "".join(words)[:chars]


async def test_an_18000_character_answer_streams_in_at_most_20_calls(tmp_path: Path) -> None:
    text = answer(18_000)
    async with running_bot(tmp_path) as bot:
        bot.llm.reply_text(text, chunk_size=4)  # ~4 characters a delta, like the real capture
        await bot.mention("tell me everything")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        calls = [c for c in bot.slack.calls if c.method in STREAM_CALLS]
        assert 0 < len(calls) <= 20, [c.method for c in calls]
        streamed = [m["text"] for m in bot.slack.messages if m["text"].lstrip().startswith("word")]
        assert "".join(streamed).replace("\n", "").replace(" ", "") == text.replace(" ", "")
        assert bot.slack.uploaded_files == []


async def test_a_huge_answer_is_five_messages_and_the_whole_of_it_a_file(tmp_path: Path) -> None:
    text = answer(100_000)
    async with running_bot(tmp_path) as bot:
        bot.llm.reply_text(text, chunk_size=64)
        await bot.mention("dump it all")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        started = bot.slack.calls_to("chat.startStream")
        assert len(started) == 5
        shown = [m["text"] for m in bot.slack.messages if m["text"].lstrip().startswith("word")]
        assert len(shown) == 5
        assert shown[-1].endswith("the answer goes on in the attached file._")
        (file,) = bot.slack.uploaded_files
        assert file.text == text
        stored = await bot.deps.store.load_messages(
            (
                await bot.deps.store.find_session(
                    "T0TEST", started[0].params["channel"], started[0].params["thread_ts"]
                )
            ).id  # type: ignore[union-attr]
        )
        assert len(stored[-1].content or "") < 60_000  # what the model gets later is capped


async def test_without_streaming_a_huge_answer_is_five_posted_messages_and_a_file(
    tmp_path: Path,
) -> None:
    text = answer(100_000)
    async with running_bot(tmp_path) as bot:
        bot.slack.set_streaming_supported(False)
        bot.llm.reply_text(text, chunk_size=64)
        await bot.mention("dump it all")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        posted = [c for c in bot.slack.calls_to("chat.postMessage") if c.ok]
        assert len(posted) == 5, [c.params["text"][:40] for c in posted]
        assert len(bot.slack.calls_to("chat.update")) <= 60
        (file,) = bot.slack.uploaded_files
        assert file.text == text
