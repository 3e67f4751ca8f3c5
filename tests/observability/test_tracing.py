"""OpenTelemetry traces from a real `opsgate run --http` to a local OTLP/HTTP receiver that
decodes the protobuf with `opentelemetry-proto`: span names, GenAI attributes, parent and
child, the approval span, and the link from a resumed run to the paused one across a restart;
no message text by default."""

from __future__ import annotations

import asyncio
import gzip
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from bot.observability.tracing import configure_tracing
from tests.support.bot_process import SECRET, bot_process
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import block_actions, interaction_body, sign

pytestmark = pytest.mark.processes  # child processes, as tests/processes


def _value(value: AnyValue) -> Any:
    match value.WhichOneof("value"):
        case "array_value":
            return [_value(v) for v in value.array_value.values]
        case None:
            return None
        case which:
            return getattr(value, which)


class Receiver:
    """An OTLP/HTTP trace endpoint: `spans` as dicts, in arrival order."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.changed = asyncio.Condition()
        self.url = ""

    async def traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(body)
        async with self.changed:
            for resource in export.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        self.spans.append(
                            {
                                "name": span.name,
                                "trace": span.trace_id.hex(),
                                "id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(),
                                "attributes": {a.key: _value(a.value) for a in span.attributes},
                                "links": [
                                    (ln.trace_id.hex(), ln.span_id.hex()) for ln in span.links
                                ],
                                "start": span.start_time_unix_nano,
                                "end": span.end_time_unix_nano,
                            }
                        )
            self.changed.notify_all()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def named(self, name: str) -> list[dict[str, Any]]:
        return [span for span in self.spans if span["name"] == name]

    async def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = 30) -> None:
        async def until() -> None:
            async with self.changed:
                await self.changed.wait_for(predicate)

        try:
            await asyncio.wait_for(until(), timeout)
        except TimeoutError:
            names = [s["name"] for s in self.spans]
            raise AssertionError(f"receiver: no {what} in {timeout}s: {names}") from None


@asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.add_routes([web.post("/v1/traces", found.traces)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    found.url = f"http://127.0.0.1:{port}"
    try:
        yield found
    finally:
        await runner.cleanup()


def _approve_value(params: dict[str, object]) -> str:
    import json

    blocks = params["blocks"]
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    assert isinstance(blocks, list)
    for block in blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == "opsgate_approve":
                return str(element["value"])
    raise AssertionError("no Approve button on the card")


def test_tracing_is_off_without_an_endpoint() -> None:
    assert configure_tracing({}) is None
    assert configure_tracing({"OTEL_TRACES_EXPORTER": "none"}) is None


async def test_a_paused_and_resumed_run_is_one_trace_linked_across_a_restart(
    tmp_path: Path,
) -> None:
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        receiver() as otlp,
        httpx.AsyncClient(timeout=10) as http,
    ):
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_SERVICE_NAME": "opsgate-test",
        }
        llm.reply_tool_calls(
            [("call_1", "run_command", {"command": "echo token-in-arguments"})],
            "Running it now.",
        )
        llm.reply_text("All done, the answer text.")
        async with bot_process(tmp_path, llm, slack, **env) as bot:
            assert await bot.mention(http, "check hunter2 please", ts="1700000002.000100") == 200
            [card] = await slack.wait_for(
                "chat.postMessage", where=lambda c: "opsgate_approve" in str(c.params), timeout=30
            )
            assert await bot.stop(signal.SIGTERM) == 0
        await otlp.wait_for("paused run", lambda: bool(otlp.named("invoke_agent opsgate")))
        async with bot_process(tmp_path, llm, slack, **env) as bot:
            payload = block_actions(
                "opsgate_approve",
                _approve_value(card.params),
                user="U0BOB",
                channel="C0OPS",
                message_ts=str(card.response["ts"]),
            )
            body = interaction_body(payload)
            response = await http.post(
                f"{bot.url}/slack/events",
                content=body,
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    **sign(SECRET, body),
                },
            )
            assert response.status_code == 200
            await otlp.wait_for(
                "resumed run", lambda: len(otlp.named("invoke_agent opsgate")) == 2, timeout=60
            )
            assert await bot.stop(signal.SIGTERM) == 0

    paused, resumed = otlp.named("invoke_agent opsgate")
    assert (resumed["trace"], resumed["parent"]) == (paused["trace"], paused["id"])
    assert resumed["links"] == [(paused["trace"], paused["id"])]
    assert paused["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert paused["attributes"]["gen_ai.conversation.id"] == "C0OPS/1700000002.000100"
    chats = otlp.named("chat test-model")
    assert [(c["trace"], c["parent"]) for c in chats] == [
        (paused["trace"], paused["id"]),
        (resumed["trace"], resumed["id"]),
    ]
    first = chats[0]["attributes"]
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "openai"
    assert first["gen_ai.request.model"] == first["gen_ai.response.model"] == "test-model"
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] > 0
    [tool] = otlp.named("execute_tool run_command")
    assert (tool["trace"], tool["parent"]) == (resumed["trace"], resumed["id"])
    assert tool["attributes"]["gen_ai.tool.name"] == "run_command"
    assert tool["attributes"]["gen_ai.tool.call.id"] == "call_1"
    [approval] = otlp.named("approval run_command")
    assert (approval["trace"], approval["parent"]) == (paused["trace"], paused["id"])
    decided = approval["attributes"]
    assert decided["opsgate.approval.decision"] == "approved"
    assert decided["opsgate.approval.approvers"] == ["U0BOB"]
    assert decided["opsgate.approval.required"] == 1
    assert decided["opsgate.approval.rule"]
    assert decided["opsgate.approval.wait_seconds"] >= 0
    assert approval["end"] >= approval["start"]
    text = repr([span["attributes"] for span in otlp.spans])
    for secret in ("hunter2", "token-in-arguments", "Running it now", "answer text"):
        assert secret not in text


async def test_message_text_is_recorded_only_when_asked_for(tmp_path: Path) -> None:
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        receiver() as otlp,
        httpx.AsyncClient(timeout=10) as http,
    ):
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
        }
        llm.reply_text("The disk is 42% full.")
        async with bot_process(tmp_path, llm, slack, **env) as bot:
            assert await bot.mention(http, "how full is the disk", ts="1700000003.000100") == 200
            await otlp.wait_for("chat span", lambda: bool(otlp.named("chat test-model")))
            assert await bot.stop(signal.SIGTERM) == 0
    [chat] = otlp.named("chat test-model")
    assert "how full is the disk" in chat["attributes"]["gen_ai.input.messages"]
    assert "The disk is 42% full." in chat["attributes"]["gen_ai.output.messages"]


async def test_a_waiting_runs_spans_reach_the_collector_before_its_click(tmp_path: Path) -> None:
    """The paused part's spans are exported at the pause (not at the resume, not at a stop);
    the resumed part continues the same trace, linked to the paused part; every span of the
    conversation carries its `gen_ai.conversation.id`."""
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        receiver() as otlp,
        httpx.AsyncClient(timeout=10) as http,
    ):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url}  # the batch processor's own delay
        llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi"})])
        llm.reply_text("Done.")
        async with bot_process(tmp_path, llm, slack, **env) as bot:
            assert await bot.mention(http, "say hi", ts="1700000004.000100") == 200
            [card] = await slack.wait_for(
                "chat.postMessage", where=lambda c: "opsgate_approve" in str(c.params), timeout=30
            )
            await otlp.wait_for(
                "the paused part",
                lambda: bool(otlp.named("invoke_agent opsgate") and otlp.named("chat test-model")),
            )
            assert len(llm.requests) == 1  # still waiting: nobody has clicked
            payload = block_actions(
                "opsgate_approve",
                _approve_value(card.params),
                user="U0BOB",
                channel="C0OPS",
                message_ts=str(card.response["ts"]),
            )
            body = interaction_body(payload)
            response = await http.post(
                f"{bot.url}/slack/events",
                content=body,
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    **sign(SECRET, body),
                },
            )
            assert response.status_code == 200
            await otlp.wait_for(
                "the resumed part",
                lambda: (
                    len(otlp.named("invoke_agent opsgate")) == 2
                    and len(otlp.named("chat test-model")) == 2
                ),
            )
            assert await bot.stop(signal.SIGTERM) == 0
    paused, resumed = otlp.named("invoke_agent opsgate")
    assert resumed["trace"] == paused["trace"]
    assert resumed["links"] == [(paused["trace"], paused["id"])]
    assert paused["end"] <= resumed["start"]
    conversation = "C0OPS/1700000004.000100"
    for span in (paused, resumed, *otlp.named("chat test-model")):
        assert span["trace"] == paused["trace"]
        assert span["attributes"]["gen_ai.conversation.id"] == conversation, span["name"]
