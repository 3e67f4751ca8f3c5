"""The real llama.cpp server (xllamacpp) serving SmolLM2-135M on loopback, driven through the
real agent loop and the Slack harness: a tool call, its resume after approval, a reply bounded
by `max_tokens`, and a context window learned from the server's own HTTP 400.

A 135M model does not call a tool for every prompt; with temperature 0, a fixed seed and the
chat template in tests/fixtures/llamacpp/ (a tools section with one worked example) it calls
one for "Please run uptime" every time, and each test asserts it did: a model that answers in
words instead fails the test, it is never skipped.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from agent_core import (
    AgentRunOptions,
    AgentSession,
    ChatClientAgent,
    ContextBudget,
    Finish,
    FinishReason,
    FunctionTool,
    InMemoryContextWindows,
    TextDelta,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolResult,
    resolve_context_window,
    tool,
)
from agent_core.openai import OpenAIChatClient
from bot.cli.check import run_check
from bot.settings import Settings
from bot.tools import TEMPLATE_WARNING
from tests.support.harness import running_bot, texts
from tests.support.llamacpp import LlamaCppServer

UPTIME = " 20:41:07 up 3 days,  2:11,  1 user,  load average: 0.10, 0.20, 0.30"
ASK = "Please run uptime"


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaCppServer]:
    with LlamaCppServer(n_ctx=4096) as running:
        yield running


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0)) as client:
        yield client


def uptime_tool(output: str = UPTIME, *, gated: bool = True) -> FunctionTool:
    @tool(name="run_command", requires_approval=gated)
    def run_command(command: str) -> str:
        """Run a shell command on the host and return its output."""
        return output

    return run_command


async def test_start_up_reads_the_running_window_from_the_server(
    server: LlamaCppServer, http: httpx.AsyncClient
) -> None:
    client = OpenAIChatClient(http, model=server.model, base_url=server.base_url)
    tokens, source = await resolve_context_window(server.model, probe=client)
    assert tokens == 4096 and source == f"GET {server.root}/props (n_ctx)"


async def test_a_tool_call_pauses_and_resumes_after_approval(
    server: LlamaCppServer, http: httpx.AsyncClient
) -> None:
    client = OpenAIChatClient(http, model=server.model, base_url=server.base_url)
    agent = ChatClientAgent(client, instructions="You are OpsGate.", tools=[uptime_tool()])
    paused = [u async for u in agent.run(ASK, AgentSession("resume"))]
    [request] = [u for u in paused if isinstance(u, ToolApprovalRequest)]
    assert request.name == "run_command" and request.arguments == {"command": "uptime"}
    assert paused[-1] == Finish(FinishReason.AWAITING_APPROVAL, paused[-1].usage)

    options = AgentRunOptions().with_tool_approval_responses(
        [ToolApprovalResponse.approve(request.call_id)]
    )
    resumed = [u async for u in agent.run(None, AgentSession("resume"), options)]
    [result] = [u for u in resumed if isinstance(u, ToolResult)]
    assert result.content == UPTIME
    [finish] = [u for u in resumed if isinstance(u, Finish)]
    assert finish.finish_reason is FinishReason.STOP
    assert "".join(u.text for u in resumed if isinstance(u, TextDelta)).strip()


async def test_a_reply_is_bounded_by_max_tokens(
    server: LlamaCppServer, http: httpx.AsyncClient
) -> None:
    """SmolLM2 answers this one with a phrase it repeats until something stops it."""
    client = OpenAIChatClient(http, model=server.model, base_url=server.base_url)
    agent = ChatClientAgent(client, context=ContextBudget(context_tokens=4096, reply_tokens=24))
    updates = [u async for u in agent.run("hello, who are you?", AgentSession("bounded"))]
    [finish] = [u for u in updates if isinstance(u, Finish)]
    assert finish.finish_reason is FinishReason.LENGTH
    assert finish.usage is not None and finish.usage.completion_tokens <= 24


@pytest.mark.timeout(300)
async def test_a_window_learned_from_the_servers_400_and_the_next_message_works(
    server: LlamaCppServer, http: httpx.AsyncClient
) -> None:
    """No setting and no start-up probe: the agent believes 128,000 tokens; a 20,000-character
    output makes the resumed request far longer than the server's 4,096; the server's 400
    says `n_ctx`, the agent remembers it, compacts, and answers; so does the next message."""
    huge = "".join(f"{n:05d} ok /var/log/app.log rotated\n" for n in range(700))[:20_000]
    assert len(huge) == 20_000
    windows = InMemoryContextWindows()
    client = OpenAIChatClient(http, model=server.model, base_url=server.base_url)
    agent = ChatClientAgent(
        client,
        instructions="You are OpsGate.",
        tools=[uptime_tool(huge, gated=False)],
        windows=windows,
    )
    assert agent.context is not None and agent.context.context_tokens == 128_000
    two_rounds = AgentRunOptions(max_rounds=2)  # the small model may call the tool again
    updates = [u async for u in agent.run(ASK, AgentSession("long"), two_rounds)]
    [result, *_] = [u for u in updates if isinstance(u, ToolResult)]
    assert result.content == huge  # people get the whole output
    finish = updates[-1]
    assert isinstance(finish, Finish) and finish.finish_reason is not FinishReason.ERROR, finish
    assert windows.windows == {server.model: 4096}

    after = [u async for u in agent.run("thanks, who are you?", AgentSession("long"))]
    last = after[-1]
    assert isinstance(last, Finish) and last.finish_reason is not FinishReason.ERROR, last


@pytest.mark.timeout(300)
async def test_through_slack_a_card_then_the_answer_after_approve(
    server: LlamaCppServer, tmp_path: Path
) -> None:
    async with running_bot(tmp_path, llm_url=server.base_url, tools=[uptime_tool()]) as bot:
        await bot.mention(ASK)
        [card] = await bot.wait_cards(1, timeout=120)
        assert "uptime" in str(card["params"]["blocks"])
        response = await bot.click("opsgate_approve", card["ledger_id"], user="U0BOB")
        assert response.status_code == 200
        await bot.settle(timeout=120)
        said = "\n".join(texts(bot.slack))
    # The card says who approved it: once, with the result, when the call ran within the
    # redraw's settle; else approved first, then run.
    shown = ("Approved by <@U0BOB>: `run_command`", "Ran (approved by <@U0BOB>): `run_command`")
    assert any(card in said for card in shown), said
    assert f"`run_command`: {UPTIME.strip()}" in said  # the stored call ran, once
    answer = said.split(UPTIME.strip(), 1)[1]
    assert answer.strip(), said  # and the model answered after it, in the thread


async def test_check_warns_about_a_chat_template_without_tools(tmp_path: Path) -> None:
    """SmolLM2's own chat template has no tools section: llama.cpp ignores `tools` and the
    model only chats. `opsgate check` says so from /props, and `--tools` proves it."""
    with LlamaCppServer(n_ctx=2048, template=None) as plain:
        settings = Settings(
            openai_base_url=plain.base_url,
            opsgate_model=plain.model,
            opsgate_db=str(tmp_path / "opsgate.db"),
            _env_file=None,
        )
        out = io.StringIO()
        assert await run_check(out=out, settings=settings, chat=True, tools=True) == 1
    report = out.getvalue()
    assert f"warn llm: {TEMPLATE_WARNING}" in report
    assert "ok   llm: context window 2,048 tokens (from GET " in report
    [line] = [line for line in report.splitlines() if "plain words" in line]
    assert line.startswith("FAIL llm: ")
