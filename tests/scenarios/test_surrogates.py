"""Lone surrogates (a JSON `\\ud800` escape with no partner) from the model or a tool, end to end.

Python decodes such an escape into a `str` that cannot be encoded as UTF-8, so the first
`.encode()` downstream (SQLite, the Slack request, the next model request) used to end the run with
"Something went wrong" and leave the turn unsaved. They become U+FFFD where the text comes in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_core import Tool, ToolError, tool
from tests.support.harness import Bot, running_bot, texts


def frame(delta: str, finish: str = "null") -> bytes:
    """One `chat.completion.chunk` written by hand, so the escapes go on the wire as they are."""
    return (
        b'data: {"id":"chatcmpl-s","object":"chat.completion.chunk","created":1700000000,'
        b'"model":"m","choices":[{"index":0,"delta":'
        + delta.encode()
        + b',"finish_reason":'
        + finish.encode()
        + b"}]}\n\n"
    )


def text_stream(*pieces: str) -> bytes:
    deltas = [frame('{"role":"assistant","content":""}')]
    deltas += [frame('{"content":"' + piece + '"}') for piece in pieces]
    return b"".join(deltas) + frame("{}", '"stop"') + b"data: [DONE]\n\n"


def make_tools(seen: list[str]) -> list[Tool]:
    @tool
    def echo(text: str) -> str:
        """Repeat the text back."""
        seen.append(text)
        return f"echo: {text}"

    @tool
    def garble() -> str:
        """Return text holding a lone surrogate, as a tool relaying JSON from elsewhere may."""
        return "out \udfff put"

    @tool
    def refuse() -> str:
        """Fail with a message holding a lone surrogate."""
        raise ToolError("no \ud800 way")

    return [echo, garble, refuse]


async def saved_messages(bot: Bot) -> list[Any]:
    (started,) = (
        bot.slack.calls_to("chat.startStream")[:1] or bot.slack.calls_to("chat.postMessage")[:1]
    )
    session = await bot.deps.store.find_session(
        "T0TEST", started.params["channel"], started.params["thread_ts"]
    )
    assert session is not None
    return await bot.deps.store.load_messages(session.id)


def shown(bot: Bot) -> str:
    """Everything posted, streamed pieces joined."""
    return "".join(texts(bot.slack))


async def test_a_lone_surrogate_in_streamed_text_is_replaced_shown_and_saved(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools([])) as bot:
        bot.llm.reply_raw(text_stream("broken ", "\\ud800 here", " and \\udc00 there"))
        await bot.mention("say something odd")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert "broken \ufffd here and \ufffd there" in shown(bot)
        assert "Something went wrong" not in shown(bot)
        messages = await saved_messages(bot)
        assert messages[-1].role == "assistant"
        assert messages[-1].content == "broken \ufffd here and \ufffd there"
        # The proper pair in the same stream is kept as the one character it encodes.
        bot.llm.reply_raw(text_stream("smile \\ud83d\\ude00"))
        await bot.mention("again")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert "smile \U0001f600" in shown(bot)


async def test_lone_surrogates_in_tool_arguments_and_output_are_replaced(tmp_path: Path) -> None:
    seen: list[str] = []
    # Arguments arrive as JSON text inside the JSON chunk: one call holds a surrogate escaped once
    # (a lone surrogate in the arguments text itself), the other escaped twice (it appears when
    # the arguments are parsed).
    calls = (
        '{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":'
        '{"name":"echo","arguments":"{\\"text\\": \\"one \\ud800\\"}"}},'
        '{"index":1,"id":"call_b","type":"function","function":'
        '{"name":"echo","arguments":"{\\"text\\": \\"two \\\\udbff\\"}"}},'
        '{"index":2,"id":"call_c","type":"function","function":'
        '{"name":"garble","arguments":"{}"}},'
        '{"index":3,"id":"call_d","type":"function","function":'
        '{"name":"refuse","arguments":"{}"}}]}'
    )
    stream = (
        frame('{"role":"assistant","content":null}')
        + frame(calls)
        + frame("{}", '"tool_calls"')
        + b"data: [DONE]\n\n"
    )
    async with running_bot(tmp_path, tools=make_tools(seen)) as bot:
        bot.llm.reply_raw(stream)
        bot.llm.reply_text("All four done.")
        await bot.mention("echo odd things")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert seen == ["one \ufffd", "two \ufffd"]
        assert "All four done." in shown(bot)
        assert "Something went wrong" not in shown(bot)
        follow_up = bot.llm.requests[1]["messages"]
        answers = [m["content"] for m in follow_up if m["role"] == "tool"]
        assert answers == [
            "echo: one \ufffd",
            "echo: two \ufffd",
            "out \ufffd put",
            "Error: no \ufffd way",
        ]
        messages = await saved_messages(bot)
        assert [m.content for m in messages if m.role == "tool"] == answers
        assert messages[-1].content == "All four done."
        assert bot.llm.unexpected == []
