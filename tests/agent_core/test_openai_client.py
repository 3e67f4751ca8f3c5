"""`OpenAIChatClient` against a real loopback server replaying real provider captures."""

from __future__ import annotations

import asyncio
import email.utils
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from agent_core import (
    ChatClient,
    ChatClientError,
    ChatMessage,
    ChatOptions,
    ChatUpdate,
    Finish,
    FinishReason,
    ProviderError,
    ReasoningDelta,
    StreamError,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallStarted,
    Usage,
    tool,
)
from agent_core.openai import OpenAIChatClient
from tests.support.llm_server import LLMStandIn, fixture_bytes

QUESTION = [ChatMessage.system("Be brief."), ChatMessage.user("What is up?")]


@dataclass
class SleepRecorder:
    """Stands in for `asyncio.sleep`: records each requested delay and returns at once."""

    delays: list[float] = field(default_factory=list)

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def client(http: httpx.AsyncClient, llm: LLMStandIn, sleeps: SleepRecorder) -> OpenAIChatClient:
    return OpenAIChatClient(http, model="test-model", base_url=llm.base_url, sleep=sleeps)


@dataclass
class Turn:
    """What one streamed turn produced, sorted by kind, plus the raw order."""

    updates: list[ChatUpdate]
    error: Exception | None = None

    @property
    def text(self) -> str:
        return "".join(u.text for u in self.updates if isinstance(u, TextDelta))

    @property
    def reasoning(self) -> str:
        return "".join(u.text for u in self.updates if isinstance(u, ReasoningDelta))

    @property
    def calls(self) -> list[ToolCall]:
        return [u.call for u in self.updates if isinstance(u, ToolCallEnded)]

    @property
    def started(self) -> list[tuple[str, str]]:
        return [(u.call_id, u.name) for u in self.updates if isinstance(u, ToolCallStarted)]

    @property
    def finishes(self) -> list[Finish]:
        return [u for u in self.updates if isinstance(u, Finish)]

    def argument_text(self, call_id: str) -> str:
        return "".join(
            u.delta
            for u in self.updates
            if isinstance(u, ToolCallArgumentsDelta) and u.call_id == call_id
        )


async def run_turn(client: ChatClient, messages: list[ChatMessage] = QUESTION, **kw: Any) -> Turn:
    """Everything the client yields; a `ChatClientError` is kept, not raised."""
    turn = Turn([])
    try:
        async for update in client.stream(messages, **kw):
            turn.updates.append(update)
    except ChatClientError as exc:
        turn.error = exc
    return turn


def assert_well_formed(turn: Turn) -> None:
    """The ChatClient contract: one Finish, last; Ended right before it; Started before deltas."""
    assert turn.error is None, turn.error
    assert len(turn.finishes) == 1
    assert turn.updates[-1] is turn.finishes[0]
    ended = len(turn.calls)
    assert all(isinstance(u, ToolCallEnded) for u in turn.updates[-1 - ended : -1])
    assert [c.id for c in turn.calls] == [cid for cid, _ in turn.started]
    for call in turn.calls:
        first_started = next(
            i
            for i, u in enumerate(turn.updates)
            if isinstance(u, ToolCallStarted) and u.call_id == call.id
        )
        deltas = [
            i
            for i, u in enumerate(turn.updates)
            if isinstance(u, ToolCallArgumentsDelta) and u.call_id == call.id
        ]
        assert all(i > first_started for i in deltas)
        assert turn.argument_text(call.id) == call.arguments


# -- the captured fixtures ---------------------------------------------------------------------

PARALLEL_CALLS = [
    ToolCall(
        id="call_JMW1whyEaYG438VE1OIflxA2",
        name="GetWeatherArgs",
        arguments='{"city": "Edinburgh", "country": "GB", "units": "c"}',
    ),
    ToolCall(
        id="call_DNYTawLBoN8fj3KN6qU9N1Ou",
        name="get_stock_price",
        arguments='{"ticker": "AAPL", "exchange": "NASDAQ"}',
    ),
]


async def test_openai_parallel_tool_calls(llm: LLMStandIn, client: OpenAIChatClient) -> None:
    llm.reply_fixture("openai_parallel_tool_calls.sse.txt")
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.calls == PARALLEL_CALLS
    assert turn.started == [
        ("call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs"),
        ("call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price"),
    ]
    assert turn.text == "" and turn.reasoning == ""
    assert turn.finishes[0] == Finish(FinishReason.TOOL_CALLS, Usage(149, 60, 209))


async def test_openai_parallel_tool_calls_with_crlf_split_across_writes(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    body = fixture_bytes("openai_parallel_tool_calls.sse.txt").replace(b"\n", b"\r\n")
    assert b"\r\n\r\n" in body
    llm.reply_raw(body, chunk_size=7)  # odd size: some CRLFs straddle two writes
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.calls == PARALLEL_CALLS
    assert turn.finishes[0] == Finish(FinishReason.TOOL_CALLS, Usage(149, 60, 209))


async def test_azure_empty_choices_and_null_usage(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    llm.reply_fixture("azure_prompt_filter_empty_choices.chunks.txt")
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.text == "Capital of Denmark."
    assert [u.text for u in turn.updates if isinstance(u, TextDelta)] == [
        "Capital",
        " of",
        " Denmark",
        ".",
    ]
    assert turn.reasoning == ""
    assert turn.calls == []
    assert turn.finishes[0] == Finish(FinishReason.STOP, Usage(15, 78, 93))


async def test_openrouter_error_chunk_after_finish_raises_provider_message(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    llm.reply_fixture("openrouter_comments_and_midstream_error.sse.txt")
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.provider_message == "Token limit reached"
    assert "Token limit reached" in str(turn.error)
    assert turn.error.partial_text == ""
    assert turn.reasoning == "We need to respond to a greeting. The user"
    assert turn.text == ""
    assert turn.finishes == []  # the error wins over the finish chunks before it


async def test_openrouter_two_finish_chunks_give_one_finish(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    frames = fixture_bytes("openrouter_comments_and_midstream_error.sse.txt").split(b"\n\n")
    without_error = b"\n\n".join(f for f in frames if b'"error"' not in f)
    assert without_error.count(b'"finish_reason":"length"') == 2
    llm.reply_raw(without_error)
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.finishes == [Finish(FinishReason.LENGTH, None)]
    assert turn.reasoning == "We need to respond to a greeting. The user"
    assert turn.text == ""


GROQ_MESSAGE = (
    "Tool call validation failed: tool call validation failed: parameters for tool "
    "get_something_by_name did not match schema: errors: [missing properties: 'name', "
    "additionalProperties 'invalid_param' not allowed]"
)


async def test_groq_event_error_frame(llm: LLMStandIn, client: OpenAIChatClient) -> None:
    llm.reply_fixture("groq_event_error_midstream.sse.txt")
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.provider_message == GROQ_MESSAGE
    assert GROQ_MESSAGE in str(turn.error)
    assert turn.error.status_code == 400
    assert turn.error.partial_text == ""
    assert turn.text == ""
    assert turn.reasoning.startswith("We need to call the tool with invalid parameters first")
    assert turn.reasoning.endswith('Then second call with name: "test". Let\'s do that.')


async def test_mistral_whole_call_without_index_or_type(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    llm.reply_fixture("mistral_whole_tool_call_no_index.chunks.txt")
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.calls == [
        ToolCall(id="gSIMJiOkT", name="weather", arguments='{"location": "San Francisco"}')
    ]
    assert turn.started == [("gSIMJiOkT", "weather")]
    assert turn.text == ""
    assert turn.finishes[0] == Finish(FinishReason.TOOL_CALLS, Usage(124, 22, 146))


async def test_deepseek_reasoning_stays_out_of_text(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    llm.reply_fixture("deepseek_reasoning_then_tool_call.chunks.txt")
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert not any(isinstance(u, TextDelta) for u in turn.updates)
    assert turn.reasoning == (
        "The user is asking for the weather in San Francisco. I need to use the weather tool "
        "to get this information. Let me invoke the weather tool with the location parameter "
        'set to "San Francisco".'
    )
    assert turn.calls == [
        ToolCall(
            id="call_00_ioIn7yN9p1ZOMNpDLwd4MgAF",
            name="weather",
            arguments='{"location": "San Francisco"}',
        )
    ]
    assert turn.finishes[0] == Finish(FinishReason.TOOL_CALLS, Usage(339, 83, 422))


# -- assembling tool calls ---------------------------------------------------------------------


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return {"id": "chatcmpl-x", "object": "chat.completion.chunk", "choices": [choice]}


async def test_parallel_calls_on_one_index_with_repeated_id_and_name(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    def call(
        call_id: str | None, name: str | None, arguments: str, index: int = 0
    ) -> dict[str, Any]:
        fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
        if call_id:
            fragment["id"] = call_id
        if name:
            fragment["function"]["name"] = name
        return chunk({"tool_calls": [fragment]})

    llm.reply_chunks(
        [
            chunk({"role": "assistant", "content": "Checking."}),
            call("call_a", "lookup", '{"q":'),
            call("call_a", "lookup", '"x"'),  # id and name repeated: not concatenated
            call(None, None, "}"),
            call("call_b", "restart", '{"svc":'),  # same index 0, new id: a second call
            call(None, "restart", '"web"}'),
            chunk({}, "stop"),  # the provider said stop although it made calls
        ],
        done=False,  # a finish without [DONE] is acceptable
    )
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.calls == [
        ToolCall(id="call_a", name="lookup", arguments='{"q":"x"}'),
        ToolCall(id="call_b", name="restart", arguments='{"svc":"web"}'),
    ]
    assert turn.text == "Checking."
    assert turn.finishes == [Finish(FinishReason.TOOL_CALLS, None)]


async def test_arguments_before_id_and_name_are_held_until_started(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    llm.reply_chunks(
        [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}),
            chunk({"tool_calls": [{"index": 0, "id": "call_late", "function": {"name": "f"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
            chunk({}, "tool_calls"),
        ]
    )
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.calls == [ToolCall(id="call_late", name="f", arguments='{"a": 1}')]
    assert [type(u).__name__ for u in turn.updates] == [
        "ToolCallStarted",
        "ToolCallArgumentsDelta",
        "ToolCallArgumentsDelta",
        "ToolCallEnded",
        "Finish",
    ]


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ("stop", FinishReason.STOP),
        ("length", FinishReason.LENGTH),
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("tool_calls", FinishReason.TOOL_CALLS),
        ("function_call", FinishReason.TOOL_CALLS),
    ],
)
async def test_finish_reason_mapping(
    llm: LLMStandIn, client: OpenAIChatClient, wire: str, expected: FinishReason
) -> None:
    llm.reply_chunks([chunk({"content": "Hi"}), chunk({}, wire)])
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.text == "Hi"
    assert turn.finishes == [Finish(expected, None)]


async def test_stand_in_text_reply_round_trips(llm: LLMStandIn, client: OpenAIChatClient) -> None:
    llm.reply_text("Deploy finished without errors.", chunk_size=5)
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.text == "Deploy finished without errors."
    assert len([u for u in turn.updates if isinstance(u, TextDelta)]) == 7
    assert turn.finishes == [Finish(FinishReason.STOP, Usage(10, 7, 17))]


# -- broken streams ----------------------------------------------------------------------------


async def test_midstream_error_chunk_keeps_partial_text(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    llm.fail_midstream("Restarting the web serv", message="overloaded, try again")
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.provider_message == "overloaded, try again"
    assert "overloaded, try again" in str(turn.error)
    assert turn.error.partial_text == "Restarting the web serv"
    assert turn.text == "Restarting the web serv"
    assert len(llm.requests) == 1  # a failure after the stream started is never retried


@pytest.mark.parametrize("done", [False, True])
async def test_stream_without_finish_reason_is_truncated(
    llm: LLMStandIn, client: OpenAIChatClient, done: bool
) -> None:
    llm.reply_chunks([chunk({"content": "Half an"}), chunk({"content": " answer"})], done=done)
    turn = await run_turn(client)
    assert isinstance(turn.error, StreamError)
    assert "truncated" in str(turn.error)
    assert turn.error.partial_text == "Half an answer"
    assert turn.finishes == []


async def test_malformed_json_names_the_problem(llm: LLMStandIn, client: OpenAIChatClient) -> None:
    llm.reply_raw(
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
        b'data: {"choices": [{"delta": \n\n'
    )
    turn = await run_turn(client)
    assert isinstance(turn.error, StreamError)
    assert "malformed JSON" in str(turn.error)
    assert '{"choices": [{"delta":' in str(turn.error)
    assert turn.error.partial_text == "Hi"


async def test_read_timeout_midstream_is_a_clear_stream_error(
    llm: LLMStandIn, http: httpx.AsyncClient, sleeps: SleepRecorder
) -> None:
    release = asyncio.Event()
    first_sent = llm.reply_text_gated("First piece, then silence.", release)
    client = OpenAIChatClient(
        http,
        model="test-model",
        base_url=llm.base_url,
        sleep=sleeps,
        timeout=httpx.Timeout(5.0, read=0.2),
    )
    try:
        turn = await run_turn(client)
    finally:
        release.set()
    assert first_sent.is_set()
    assert isinstance(turn.error, StreamError)
    assert "timed out" in str(turn.error)
    assert turn.error.partial_text == "First pi"
    assert sleeps.delays == [] and len(llm.requests) == 1


# -- HTTP errors and retries -------------------------------------------------------------------


async def test_429_then_success_honours_retry_after_ms(
    llm: LLMStandIn, client: OpenAIChatClient, sleeps: SleepRecorder
) -> None:
    llm.reply_status(
        429,
        {"error": {"message": "Rate limit reached", "type": "requests"}},
        headers={"retry-after-ms": "250", "retry-after": "7"},
    )
    llm.reply_text("Back again.")
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.text == "Back again."
    assert sleeps.delays == [0.25]
    assert len(llm.requests) == 2
    assert llm.requests[0] == llm.requests[1]


async def test_retry_after_seconds_and_http_date(
    llm: LLMStandIn, client: OpenAIChatClient, sleeps: SleepRecorder
) -> None:
    llm.reply_status(503, headers={"retry-after": "2"})
    in_30s = email.utils.formatdate(time.time() + 30, usegmt=True)
    llm.reply_status(429, headers={"retry-after": in_30s})
    llm.reply_text("ok")
    turn = await run_turn(client)
    assert turn.text == "ok"
    assert sleeps.delays[0] == 2.0
    assert 27.0 <= sleeps.delays[1] <= 30.0


async def test_500_until_retries_are_exhausted(
    llm: LLMStandIn, http: httpx.AsyncClient, sleeps: SleepRecorder
) -> None:
    client = OpenAIChatClient(
        http, model="test-model", base_url=llm.base_url, sleep=sleeps, max_retries=2
    )
    for _ in range(4):
        llm.reply_status(500, {"error": {"message": "The engine is overloaded", "code": None}})
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.status_code == 500
    assert turn.error.provider_message == "The engine is overloaded"
    assert "HTTP 500" in str(turn.error) and "The engine is overloaded" in str(turn.error)
    assert len(llm.requests) == 3  # max_retries + 1
    assert llm.queued == 1
    assert len(sleeps.delays) == 2
    assert 0.25 <= sleeps.delays[0] <= 0.5  # backoff_base * 2**0, with jitter
    assert 0.5 <= sleeps.delays[1] <= 1.0  # backoff_base * 2**1, with jitter


async def test_backoff_is_capped_at_backoff_max(
    llm: LLMStandIn, http: httpx.AsyncClient, sleeps: SleepRecorder
) -> None:
    client = OpenAIChatClient(
        http,
        model="test-model",
        base_url=llm.base_url,
        sleep=sleeps,
        max_retries=5,
        backoff_base=1.0,
        backoff_max=3.0,
    )
    for _ in range(6):
        llm.reply_status(502, "Bad Gateway")
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.status_code == 502
    assert "Bad Gateway" in str(turn.error)
    assert len(sleeps.delays) == 5
    assert all(0 < d <= 3.0 for d in sleeps.delays)
    assert sleeps.delays[-1] >= 1.5


async def test_400_is_not_retried(
    llm: LLMStandIn, client: OpenAIChatClient, sleeps: SleepRecorder
) -> None:
    message = "Invalid parameter: messages with role 'tool' must be a response to 'tool_calls'."
    llm.reply_status(400, {"error": {"message": message, "type": "invalid_request_error"}})
    llm.reply_text("never sent")
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.status_code == 400
    assert turn.error.provider_message == message
    assert message in str(turn.error)
    assert len(llm.requests) == 1
    assert sleeps.delays == []
    assert llm.queued == 1


@pytest.mark.parametrize("midstream", [False, True])
async def test_a_huge_provider_message_is_cut_in_the_error_but_kept_whole(
    llm: LLMStandIn, client: OpenAIChatClient, midstream: bool
) -> None:
    """A provider may echo the whole request in its error: the error's message is logged, so it
    carries the start of it and says how much was cut; the attribute keeps it whole."""
    message = "Invalid request: " + "the prompt you sent was " * 5_000
    if midstream:
        llm.fail_midstream("Check", message=message)
    else:
        llm.reply_status(400, {"error": {"message": message, "type": "invalid_request_error"}})
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.provider_message == message
    text = str(turn.error)
    assert "Invalid request: the prompt you sent was" in text
    assert len(text) < 4_200 and text.endswith(" more characters cut)")


async def test_error_body_on_200_json_is_a_provider_error(
    llm: LLMStandIn, client: OpenAIChatClient, sleeps: SleepRecorder
) -> None:
    llm.reply_status(200, {"error": {"message": "model 'test-model' is not loaded"}})
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.provider_message == "model 'test-model' is not loaded"
    assert sleeps.delays == []


async def test_connect_errors_are_retried_then_reported(
    http: httpx.AsyncClient, sleeps: SleepRecorder
) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAIChatClient(
        http,
        model="test-model",
        base_url=f"http://127.0.0.1:{port}/v1",
        sleep=sleeps,
        max_retries=2,
    )
    turn = await run_turn(client)
    assert isinstance(turn.error, ChatClientError)
    assert not isinstance(turn.error, ProviderError)
    assert f"could not connect to http://127.0.0.1:{port}/v1/chat/completions" in str(turn.error)
    assert len(sleeps.delays) == 2


async def test_api_key_never_appears_in_errors_or_repr(
    llm: LLMStandIn, http: httpx.AsyncClient
) -> None:
    key = "sk-secret-never-shown-0123"
    client = OpenAIChatClient(http, model="test-model", base_url=llm.base_url, api_key=key)
    llm.reply_status(401, {"error": {"message": "Incorrect API key provided"}})
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.status_code == 401
    assert key not in str(turn.error) and key not in repr(client)


# -- the request -------------------------------------------------------------------------------


@tool
def service_status(service: str) -> str:
    """Show whether a service is running."""
    return f"{service}: running"


async def test_request_body_and_auth_header(llm: LLMStandIn, http: httpx.AsyncClient) -> None:
    client = OpenAIChatClient(
        http, model="gpt-test", base_url=llm.base_url + "/", api_key="sk-test-123"
    )
    llm.reply_text("fine")
    history = [
        *QUESTION,
        ChatMessage.assistant(None, (ToolCall(id="c1", name="service_status", arguments="{}"),)),
        ChatMessage.tool("web: running", "c1"),
    ]
    turn = await run_turn(
        client,
        history,
        tools=[service_status],
        options=ChatOptions(temperature=0.2, parallel_tool_calls=False),
    )
    assert turn.text == "fine"
    (body,) = await llm.wait_for_requests(1)
    assert body == {
        "model": "gpt-test",
        "messages": [m.to_wire() for m in history],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "service_status",
                    "description": "Show whether a service is running.",
                    "parameters": service_status.parameters,
                },
            }
        ],
        "temperature": 0.2,
        "parallel_tool_calls": False,
    }
    assert llm.headers[0]["Authorization"] == "Bearer sk-test-123"
    assert llm.headers[0]["Accept"] == "text/event-stream"


@pytest.mark.parametrize("api_key", [None, ""])
async def test_no_auth_header_and_no_tools_without_them(
    llm: LLMStandIn, http: httpx.AsyncClient, api_key: str | None
) -> None:
    client = OpenAIChatClient(http, model="local", base_url=llm.base_url, api_key=api_key)
    llm.reply_text("hi")
    await run_turn(client, options=ChatOptions(max_tokens=50, parallel_tool_calls=True))
    (body,) = await llm.wait_for_requests(1)
    assert "Authorization" not in llm.headers[0]
    assert "tools" not in body
    assert "parallel_tool_calls" not in body  # providers reject it without tools
    assert body["max_tokens"] == 50
    assert "temperature" not in body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


# -- check(): the reachability probe behind `opsgate check` -------------------------------------


class ModelsEndpoint:
    """A provider's `GET /v1/models` on 127.0.0.1 answering `status` with `body` (JSON), recording
    each request's headers. Use it as an async context manager."""

    def __init__(self, status: int = 200, body: Any = None) -> None:
        self.status = status
        self.body = body if body is not None else {"object": "list", "data": []}
        self.headers: list[dict[str, str]] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> ModelsEndpoint:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        return web.json_response(self.body, status=self.status)


MODEL_LIST = {
    "object": "list",
    "data": [{"id": "gpt-test", "object": "model"}, {"id": "other", "object": "model"}],
}


async def test_check_lists_the_model_and_sends_the_key(http: httpx.AsyncClient) -> None:
    async with ModelsEndpoint(200, MODEL_LIST) as endpoint:
        client = OpenAIChatClient(
            http, model="gpt-test", base_url=endpoint.base_url + "/", api_key="sk-check-1"
        )
        said = await client.check()
        assert said == f"{endpoint.base_url} is reachable and lists model 'gpt-test'"
        [headers] = endpoint.headers
        assert headers["Authorization"] == "Bearer sk-check-1"

        unlisted = OpenAIChatClient(http, model="gpt-nope", base_url=endpoint.base_url)
        said = await unlisted.check()
        assert said.startswith(f"{endpoint.base_url} is reachable, but model 'gpt-nope'")
        assert "2 it lists" in said
        assert "Authorization" not in endpoint.headers[1]


async def test_check_counts_a_server_without_a_model_list_as_reachable(
    http: httpx.AsyncClient,
) -> None:
    async with ModelsEndpoint(404, {"error": "not found"}) as endpoint:
        client = OpenAIChatClient(http, model="local", base_url=endpoint.base_url)
        assert "is reachable (HTTP 404" in await client.check()


@pytest.mark.parametrize("status", [401, 403])
async def test_check_reports_a_refused_key_without_showing_it(
    http: httpx.AsyncClient, status: int
) -> None:
    key = "sk-secret-never-shown-0456"
    body = {"error": {"message": "Incorrect API key provided"}}
    async with ModelsEndpoint(status, body) as endpoint:
        client = OpenAIChatClient(http, model="m", base_url=endpoint.base_url, api_key=key)
        with pytest.raises(ProviderError) as caught:
            await client.check()
    assert caught.value.status_code == status
    assert caught.value.provider_message == "Incorrect API key provided"
    message = str(caught.value)
    assert f"{endpoint.base_url}/models refused the API key (HTTP {status})" in message
    assert "Incorrect API key provided" in message and key not in message


async def test_check_reports_a_server_error_once_without_retrying(
    http: httpx.AsyncClient, sleeps: SleepRecorder
) -> None:
    async with ModelsEndpoint(503, {"error": {"message": "overloaded"}}) as endpoint:
        client = OpenAIChatClient(
            http, model="m", base_url=endpoint.base_url, sleep=sleeps, max_retries=3
        )
        with pytest.raises(ProviderError, match=r"failed \(HTTP 503\): overloaded") as caught:
            await client.check()
    assert caught.value.status_code == 503
    assert len(endpoint.headers) == 1 and sleeps.delays == []


async def test_check_reports_an_unreachable_endpoint(http: httpx.AsyncClient) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAIChatClient(http, model="m", base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ChatClientError) as caught:
        await client.check()
    assert not isinstance(caught.value, ProviderError)
    assert f"cannot reach http://127.0.0.1:{port}/v1/models" in str(caught.value)


# -- the stand-in's own helpers (other test modules rely on them) ------------------------------


async def test_gated_reply_holds_until_released(llm: LLMStandIn, client: OpenAIChatClient) -> None:
    release = asyncio.Event()
    first_sent = llm.reply_text_gated("Rolling out to 3 hosts... done.", release)
    stream = client.stream(QUESTION)
    first = await asyncio.wait_for(anext(stream), 5)
    assert first == TextDelta("Rolling ")
    assert first_sent.is_set()
    release.set()
    rest = [update async for update in stream]
    assert "".join(u.text for u in rest if isinstance(u, TextDelta)) == "out to 3 hosts... done."
    assert rest[-1] == Finish(FinishReason.STOP, Usage(10, 4, 14))


async def test_closing_the_stand_in_ends_an_unreleased_gate(
    http: httpx.AsyncClient, sleeps: SleepRecorder
) -> None:
    release = asyncio.Event()  # never set
    async with LLMStandIn() as server:
        server.reply_text_gated("Held forever", release)
        client = OpenAIChatClient(http, model="m", base_url=server.base_url, sleep=sleeps)
        stream = client.stream(QUESTION)
        assert await asyncio.wait_for(anext(stream), 5) == TextDelta("Held for")
        await stream.aclose()  # the consumer walks away mid-stream
    assert not release.is_set()


async def test_consumer_can_stop_early_and_the_client_stays_usable(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    llm.reply_text("A long answer that nobody reads to the end.", chunk_size=4)
    llm.reply_text("Second.")
    stream = client.stream(QUESTION)
    assert await anext(stream) == TextDelta("A lo")
    await stream.aclose()
    turn = await run_turn(client)
    assert turn.text == "Second."


async def test_request_with_nothing_queued_is_500_and_recorded(
    http: httpx.AsyncClient, sleeps: SleepRecorder
) -> None:
    async with LLMStandIn() as server:
        client = OpenAIChatClient(
            http, model="m", base_url=server.base_url, sleep=sleeps, max_retries=0
        )
        turn = await run_turn(client)
        assert isinstance(turn.error, ProviderError)
        assert turn.error.status_code == 500
        assert "no reply queued" in (turn.error.provider_message or "")
        assert len(server.unexpected) == 1
        assert server.unexpected[0]["model"] == "m"


async def test_reply_with_streams_a_custom_body(llm: LLMStandIn, client: OpenAIChatClient) -> None:
    async def handler(body: dict[str, Any]) -> web.StreamResponse:
        async def frames() -> AsyncIterator[bytes]:
            yield b"event: ping\ndata: {}\n\n"  # a non-message event is ignored
            yield b'data: {"choices":[{"index":0,"delta":{"content":"' + body["model"].encode()
            yield b'"},"finish_reason":"stop"}]}\n\n'

        return web.Response(body=frames(), content_type="text/event-stream")

    llm.reply_with(handler)
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.text == "test-model"


# -- llama.cpp's own server (captures in tests/fixtures/openai-sse/llamacpp_*) -----------------


async def test_llamacpp_plain_answer(llm: LLMStandIn, client: OpenAIChatClient) -> None:
    llm.reply_fixture("llamacpp_plain.sse.txt")
    turn = await run_turn(client)
    assert_well_formed(turn)
    assert turn.text.startswith("Hello") and turn.calls == []
    assert turn.finishes[0].finish_reason is FinishReason.STOP


@pytest.mark.parametrize("name", ["llamacpp_tool_call.sse.txt", "llamacpp_tool_call_usage.sse.txt"])
async def test_llamacpp_tool_call_with_null_content_and_split_arguments(
    llm: LLMStandIn, client: OpenAIChatClient, name: str
) -> None:
    llm.reply_fixture(name, chunk_size=7)
    turn = await run_turn(client)
    assert_well_formed(turn)
    [call] = turn.calls
    assert call.name == "run_command" and "command" in call.parsed_arguments()
    assert turn.text == ""
    assert turn.finishes[0].finish_reason is FinishReason.TOOL_CALLS
    if name.endswith("_usage.sse.txt"):
        assert turn.finishes[0].usage is not None


ERRORS = Path(__file__).resolve().parent.parent / "fixtures" / "openai-errors"


def replay_http_error(llm: LLMStandIn, name: str) -> None:
    """Queue a captured error answer (tests/fixtures/openai-errors): after the `#` provenance
    line, the status line, the headers, a blank line and the body, all as sent."""
    lines = (ERRORS / name).read_text(encoding="utf-8").split("\n")
    status = int(lines[1].split()[1])
    blank = lines.index("", 2)
    headers = dict(line.split(": ", 1) for line in lines[2:blank] if ": " in line)
    body = "\n".join(lines[blank + 1 :]).rstrip("\n")
    content_type = headers.get("Content-Type", "application/json")
    llm.reply_raw(body.encode(), status=status, headers={"Content-Type": content_type})


async def test_llamacpp_context_refusal_names_the_real_window(
    llm: LLMStandIn, client: OpenAIChatClient
) -> None:
    replay_http_error(llm, "llamacpp_exceed_context_size.http.txt")
    turn = await run_turn(client)
    assert isinstance(turn.error, ProviderError)
    assert turn.error.status_code == 400 and turn.error.kind == "exceed_context_size_error"
    assert turn.error.context_exceeded and turn.error.context_window == 4096
    assert len(llm.requests) == 1  # a refusal is not retried by the client


@pytest.mark.parametrize(
    ("message", "window"),
    [
        (
            "This model's maximum context length is 1500 tokens. However, your messages "
            "resulted in 2000 tokens.",
            1500,
        ),  # OpenAI
        (
            "This model's maximum context length is 16,384 tokens. However, your request has "
            "17000 input tokens plus 512 'max_tokens'.",
            16384,
        ),  # vLLM
        ("request (8988 tokens) exceeds the available context size (4096 tokens)", 4096),
        ("prompt too long; exceeded max context length by 12 tokens", None),  # Ollama: no window
    ],
)
def test_a_refusal_for_length_says_the_window_when_the_message_does(
    message: str, window: int | None
) -> None:
    error = ProviderError("refused", status_code=400, provider_message=message)
    assert error.context_exceeded and error.context_window == window


def test_reasoning_models_get_max_completion_tokens(http: httpx.AsyncClient) -> None:
    options = ChatOptions(max_tokens=300)
    o3 = OpenAIChatClient(http, model="o3-mini").request_body(QUESTION, options=options)
    assert o3["max_completion_tokens"] == 300 and "max_tokens" not in o3
    gpt = OpenAIChatClient(http, model="gpt-4o-mini").request_body(QUESTION, options=options)
    assert gpt["max_tokens"] == 300 and "max_completion_tokens" not in gpt
