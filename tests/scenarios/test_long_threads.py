"""Long threads over real HTTP: every request fits the model's window, and the thread goes on.

The LLM stand-in refuses a request longer than its `context_limit` with HTTP 400
`context_length_exceeded`, as OpenAI does, counting with OpenAI's o200k_base encoding; the agent
counts with its own (the conservative estimate for this unknown model name).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from agent_core import (
    AgentSession,
    ChatClientAgent,
    ContextBudget,
    Finish,
    FinishReason,
    TextDelta,
    ToolResult,
    tool,
)
from agent_core._compact import SUMMARY_PROMPT
from agent_core.openai import OpenAIChatClient
from bot.store import SQLiteStore
from tests.agent_core.test_agent_over_http import assert_provider_accepts
from tests.agent_core.test_openai_client import replay_http_error
from tests.support.harness import running_bot, text_sse
from tests.support.llm_context import prompt_tokens
from tests.support.llm_server import LLMStandIn


def _is_summary(body: dict[str, Any]) -> bool:
    return body["messages"][0]["content"] == SUMMARY_PROMPT


def answer_everything(llm: LLMStandIn, n: int, *, fail_summaries: bool = False) -> None:
    """Queue `n` replies that answer whatever comes: a summary request with a summary (or HTTP
    400, to make summarising fail), anything else with a long answer naming the question."""

    async def reply(body: dict[str, Any]) -> web.StreamResponse:
        if _is_summary(body):
            if fail_summaries:
                return web.json_response({"error": {"message": "no summaries today"}}, status=400)
            summary = text_sse("Earlier: people asked about hosts; all fine.")
            return web.Response(body=summary, content_type="text/event-stream")
        question = body["messages"][-1]["content"] or ""
        text = f"Answer to {question[:12]}: " + "the web tier is healthy. " * 60
        return web.Response(body=text_sse(text), content_type="text/event-stream")

    for _ in range(n):
        llm.reply_with(reply)


async def run_turn(agent: ChatClientAgent, session: AgentSession, text: str) -> str:
    finish: Finish | None = None
    answer: list[str] = []
    async for update in agent.run(text, session):
        if isinstance(update, TextDelta):
            answer.append(update.text)
        elif isinstance(update, Finish):
            finish = update
    assert finish is not None and finish.finish_reason is FinishReason.STOP, finish
    return "".join(answer)


def agent_for(
    llm: LLMStandIn, http: httpx.AsyncClient, store: SQLiteStore, tokens: int, **kw: Any
) -> ChatClientAgent:
    client = OpenAIChatClient(http, model="stand-in-model", base_url=llm.base_url, max_retries=0)
    budget = ContextBudget(context_tokens=tokens)
    return ChatClientAgent(
        client, instructions="You are OpsGate.", store=store, context=budget, **kw
    )


async def test_a_forty_turn_thread_of_long_messages_is_answered_every_time(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    async with LLMStandIn(context_limit=8_000) as llm, SQLiteStore(tmp_path / "db") as store:
        session = await store.get_or_create_session("T1", "C1", "1.0")
        agent = agent_for(llm, http, store, 8_000)
        answer_everything(llm, 200)
        for turn in range(40):
            question = f"turn {turn:02d}: " + "why is host web-7 slow? " * 120
            assert (await run_turn(agent, AgentSession(session.id), question)).startswith(
                f"Answer to turn {turn:02d}"
            )

        assert llm.refused == []
        budget = ContextBudget(context_tokens=8_000)
        for body in llm.requests:
            assert prompt_tokens(body) <= budget.prompt_tokens
            assert_provider_accepts(body["messages"])
        summaries = [b for b in llm.requests if _is_summary(b)]
        assert summaries, "a thread this long must have been compacted"
        asked = [b for b in llm.requests if not _is_summary(b)]
        assert len(asked) == 40
        assert "[Summary of the first" in asked[-1]["messages"][1]["content"]
        assert len(await store.load_messages(session.id)) == 80  # stored history stays whole
        loaded = await store.load_context(session.id)
        assert loaded.summary is not None and loaded.summary.kind == "summary"
        assert len(loaded.messages) < 80  # a turn loads from the last compaction point


async def test_context_length_exceeded_is_compacted_harder_and_answered(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """The agent believes in a window twice the real one: the provider refuses, the user still
    gets every answer."""
    async with LLMStandIn(context_limit=6_000) as llm, SQLiteStore(tmp_path / "db") as store:
        session = await store.get_or_create_session("T1", "C1", "1.0")
        agent = agent_for(llm, http, store, 12_000)
        answer_everything(llm, 100)
        for turn in range(12):
            question = f"turn {turn:02d}: " + "disk usage on db-1? " * 150
            assert (await run_turn(agent, AgentSession(session.id), question)).startswith(
                f"Answer to turn {turn:02d}"
            )
        assert llm.refused, "the stand-in should have refused at least one request"
        for body in llm.requests:
            assert prompt_tokens(body) <= 6_000
            assert_provider_accepts(body["messages"])


async def test_when_summarising_fails_a_plain_note_says_what_was_left_out(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    async with LLMStandIn(context_limit=8_000) as llm, SQLiteStore(tmp_path / "db") as store:
        session = await store.get_or_create_session("T1", "C1", "1.0")
        agent = agent_for(llm, http, store, 8_000)
        answer_everything(llm, 100, fail_summaries=True)
        for turn in range(10):
            await run_turn(
                agent, AgentSession(session.id), f"turn {turn}: " + "status of the queue? " * 150
            )
        loaded = await store.load_context(session.id)
        assert loaded.summary is not None and loaded.summary.kind == "note"
        assert "were left out to fit the context window" in loaded.summary.text
        last = [b for b in llm.requests if not _is_summary(b)][-1]
        assert last["messages"][1]["content"].startswith("[Context note:")
        assert llm.refused == []


async def test_a_thread_with_a_200000_character_tool_output_keeps_working(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    huge = "".join(f"line {i}: ok\n" for i in range(20_000))[:200_000]
    assert len(huge) == 200_000

    @tool
    def dump_logs() -> str:
        """Print the whole log."""
        return huge

    async with LLMStandIn(context_limit=16_000) as llm, SQLiteStore(tmp_path / "db") as store:
        session = await store.get_or_create_session("T1", "C1", "1.0")
        agent = agent_for(llm, http, store, 16_000, tools=[dump_logs])
        llm.reply_tool_calls([("call_logs", "dump_logs", {})])
        answer_everything(llm, 50)
        updates = [u async for u in agent.run("show me the logs", AgentSession(session.id))]
        (result,) = [u for u in updates if isinstance(u, ToolResult)]
        assert result.content == huge  # people get the whole output
        for turn in range(5):
            await run_turn(
                agent,
                AgentSession(session.id),
                f"and now {turn}? " + "anything else in the logs? " * 50,
            )

        stored = await store.load_messages(session.id)
        assert [m.content for m in stored if m.role == "tool"] == [huge]  # stored whole
        assert llm.refused == []
        for body in llm.requests:
            assert prompt_tokens(body) <= 16_000
            assert_provider_accepts(body["messages"])
        sent = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"]
        assert sent[0]["content"].startswith("line 0: ok")
        assert "characters cut here to fit the context" in sent[0]["content"]
        assert sent[0]["content"].rstrip().endswith(huge.rstrip()[-20:])


async def test_a_window_the_refusal_states_is_learned_remembered_and_every_turn_answered(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """The stand-in says "maximum context length is 1500 tokens" while the agent believes the
    default 128,000: the first refusal teaches it the real window, every turn is answered, and
    the window is remembered in the database, so an agent on the reopened file (a restart,
    another replica) is never refused."""
    async with LLMStandIn(context_limit=1_500) as llm:
        client = OpenAIChatClient(http, model="stand-in-model", base_url=llm.base_url)
        async with SQLiteStore(tmp_path / "db") as store:
            session = await store.get_or_create_session("T1", "C1", "1.0")
            agent = ChatClientAgent(
                client, instructions="You are OpsGate.", store=store, windows=store
            )
            assert agent.context is not None and agent.context.context_tokens == 128_000
            answer_everything(llm, 200)
            for turn in range(16):
                question = f"turn {turn:02d}: " + "is the queue draining? " * 20
                assert (await run_turn(agent, AgentSession(session.id), question)).startswith(
                    f"Answer to turn {turn:02d}"
                )
            assert len(llm.refused) == 1  # once learned, never refused again
            assert await store.context_window("stand-in-model") == 1_500
            for body in llm.requests:
                assert prompt_tokens(body) <= 1_500
                assert body["max_tokens"] > 0  # every request bounds its reply
                assert_provider_accepts(body["messages"])

        async with SQLiteStore(tmp_path / "db") as reopened:
            again = ChatClientAgent(
                client, instructions="You are OpsGate.", store=reopened, windows=reopened
            )
            answer = await run_turn(again, AgentSession(session.id), "and now?")
            assert answer.startswith("Answer to")
            assert len(llm.refused) == 1
            assert llm.requests[-1]["max_tokens"] <= 1_500 // 2  # the bound shrank with the window


class _HeldAnswers:
    """Answers each question ("mNN …") with "Answer to mNN: …", holding all but its first
    piece until the test lets it go (so the run is still going while its answer shows), and
    each summary request at once with a summary that says so."""

    def __init__(self) -> None:
        self.summaries = 0
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, tag: str) -> asyncio.Event:
        return self.gates.setdefault(tag, asyncio.Event())

    async def reply(self, body: dict[str, Any]) -> web.StreamResponse:
        if _is_summary(body):
            self.summaries += 1
            text = f"SUMMARY: an earlier conversation of {len(body['messages'])} messages, calm."
            return web.Response(body=text_sse(text), content_type="text/event-stream")
        tag = str(body["messages"][-1]["content"]).split()[0]
        gate = self.gate(tag)

        def frame(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
            return b"data: " + json.dumps({**chunk, "choices": [choice]}).encode() + b"\n\n"

        async def stream() -> AsyncIterator[bytes]:
            yield frame({"role": "assistant", "content": f"Answer to {tag}: "})
            await gate.wait()
            yield frame({"content": "the queue drains. " * 40})
            yield frame({}, "stop") + b"data: [DONE]\n\n"

        return web.Response(body=stream(), content_type="text/event-stream")


async def test_after_a_refusal_every_message_of_a_long_thread_gets_its_own_answer_once(
    tmp_path: Path,
) -> None:
    """The first request is refused as the real llama.cpp refusal does (its window: 4096
    tokens); every later request of the thread is compacted, its summary asked of the model.
    Each message is sent while the previous one's answer is still streaming: each gets one
    answer, its own, and no summary is ever shown in the thread."""
    count = 16
    held = _HeldAnswers()
    filler = "is the queue on worker-7 draining, and how fast? " * 80
    async with LLMStandIn() as llm, running_bot(tmp_path, llm=llm) as bot:
        replay_http_error(llm, "llamacpp_exceed_context_size.http.txt")
        for _ in range(3 * count):
            llm.reply_with(held.reply)

        def answers(tag: str) -> list[str]:
            return [
                str(m["text"]) for m in bot.slack.messages if f"Answer to {tag}:" in str(m["text"])
            ]

        root = await bot.mention(f"m00 {filler}")
        for k in range(count):
            tag = f"m{k:02d}"
            await bot.slack.wait_until(lambda tag=tag: bool(answers(tag)), timeout=30)
            if k + 1 < count:  # the run answering `tag` is still going
                await bot.message(f"m{k + 1:02d} {filler}", thread_ts=root)
            held.gate(tag).set()
        await bot.settle(timeout=30)

        assert [len(answers(f"m{k:02d}")) for k in range(count)] == [1] * count
        shown = [str(c.params) for c in bot.slack.calls]
        assert not [p for p in shown if "SUMMARY" in p]
        assert llm.refused == [] and held.summaries >= count - 1  # compacted every time
        assert not [t for t in shown if "run_failed" in t or "couldn't" in t]
