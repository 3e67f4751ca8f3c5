"""OpenTelemetry traces with the GenAI semantic conventions, exported over OTLP/HTTP.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_TRACES_EXPORTER`) is set; everything else
comes from the standard `OTEL_*` variables the SDK reads (endpoint, headers, service name,
resource attributes, sampler). Spans go through OpenTelemetry's global tracer provider, so the
hooks (`bot/runs/driver.py`, `bot/runs/metrics.py`) cost nothing when tracing is off.

Spans: `invoke_agent opsgate` per run (`gen_ai.conversation.id` = the thread), `chat {model}`
per model request, `execute_tool {tool}` per tool execution, and `approval {tool}` for each
gated call, from its card to its decision. OpenTelemetry has no convention for a human
approval; ours is the `opsgate.approval.*` attributes. A run that pauses for hours is not one
open span: each part of it is exported when it ends, the paused part at the pause (its trace and
span ids are stored with the calls), and the resumed part is a child of the paused part's span,
linked to it, in the same trace (by the stored ids, so across a restart too; the approval span
joins that trace the same way). Every span of a run, `chat` included, carries the
conversation's `gen_ai.conversation.id` (the thread).

Message content is not recorded unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is
true; tool arguments and output never are (they may hold secrets). `opentelemetry-util-genai`
is not used: it models one request/response pair per invocation, while our runs pause, resume
in another process and carry an approval, so the few spans are written here directly.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

__all__ = [
    "CAPTURE_CONTENT",
    "TracingSetup",
    "approval_span",
    "capture_content",
    "chat_span",
    "configure_tracing",
    "current_ids",
    "links_to",
    "message_texts",
    "run_span",
    "tool_span",
    "tracing_on",
]

logger = logging.getLogger("opsgate")

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_TRACER = "opsgate"
PROVIDER = "openai"
"""`gen_ai.provider.name`: the agent speaks the OpenAI-compatible API to whatever serves it."""


@functools.cache
def _tracer() -> trace.Tracer:
    """Looked up once: before `configure_tracing` it is the API's proxy, which delegates to the
    provider once one is installed (a fresh lookup per span costs a third of the span)."""
    return trace.get_tracer(_TRACER)


_state = {"on": False}


def tracing_on() -> bool:
    """Whether this process exports spans (hooks skip work that only a span would use)."""
    return _state["on"]


def capture_content(env: Mapping[str, str] | None = None) -> bool:
    return (env if env is not None else os.environ).get(CAPTURE_CONTENT, "").lower() == "true"


class TracingSetup:
    """The SDK's provider while tracing is on; `shutdown()` flushes the last spans."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider

    def shutdown(self) -> None:
        self.provider.shutdown()


def configure_tracing(env: Mapping[str, str] | None = None) -> TracingSetup | None:
    """Install the OTLP/HTTP exporter as the global tracer provider if the environment asks
    for traces; None (and nothing installed) otherwise. Call once per process."""
    env = env if env is not None else os.environ
    exporter_names = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    wanted = bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or exporter_names
    )
    if not wanted or exporter_names == "none" or env.get("OTEL_SDK_DISABLED") == "true":
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or "opsgate"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _state["on"] = True
    logger.info("OpenTelemetry traces on (OTLP/HTTP)")
    return TracingSetup(provider)


def message_texts(messages: Sequence[Any]) -> str:
    """`gen_ai.input.messages` / `output.messages` (only with content capture on): the text of
    system, user and assistant messages; tool messages and call arguments are left out, as
    they carry what tools read and may hold secrets."""
    import json

    kept = [
        {"role": m.role, "parts": [{"type": "text", "content": m.content}]}
        for m in messages
        if m.role in ("system", "user", "assistant") and m.content
    ]
    return json.dumps(kept, ensure_ascii=False)


# -- spans ----------------------------------------------------------------------------------------


_conversation: ContextVar[str | None] = ContextVar("opsgate_conversation", default=None)
"""The conversation of the run the current task drives (its `chat` spans carry it)."""


@contextmanager
def run_span(conversation: str, links: Sequence[Link] = ()) -> Iterator[Span]:
    """`invoke_agent opsgate`, current for the run's task while it streams. A resumed part
    (`links`: the paused part's span) is that span's child, so the run stays one trace."""
    parent = None if not links else trace.set_span_in_context(NonRecordingSpan(links[0].context))
    span = _tracer().start_span(
        "invoke_agent opsgate",
        context=parent,
        kind=SpanKind.INTERNAL,
        links=links,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "opsgate",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.conversation.id": conversation,
        },
    )
    token = _conversation.set(conversation)
    try:
        with trace.use_span(span, end_on_exit=True, record_exception=True):
            yield span
    finally:
        _conversation.reset(token)


def chat_span(model: str, conversation: str | None = None) -> Span:
    """`chat {model}`, a child of the current run's span, with its conversation (the run's,
    when not given); the caller ends it."""
    conversation = conversation if conversation is not None else _conversation.get()
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": model,
    }
    if conversation is not None:
        attributes["gen_ai.conversation.id"] = conversation
    return _tracer().start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)


def tool_span(tool: str, call_id: str, seconds: float, *, outcome: str = "ok") -> None:
    """`execute_tool {tool}`, written when the result arrives (it ran for `seconds`);
    `outcome` as `opsgate_tool_seconds` counts it ("error" or "timeout": the span's status is
    an error, of `error.type` tool_error or timeout)."""
    end = time.time_ns()
    span = _tracer().start_span(
        f"execute_tool {tool}",
        kind=SpanKind.INTERNAL,
        start_time=end - int(seconds * 1e9),
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
        },
    )
    if outcome != "ok":
        span.set_status(Status(StatusCode.ERROR))
        span.set_attribute("error.type", "timeout" if outcome == "timeout" else "tool_error")
    span.end(end_time=end)


def approval_span(
    tool: str,
    *,
    parent: tuple[str, str] | None,
    asked_at: datetime,
    decided_at: datetime,
    decision: str,
    approvers: Sequence[str],
    required: int,
    rule: str,
) -> None:
    """`approval {tool}` from the card to its decision, in the paused run's trace (`parent`:
    its stored trace and span ids) when known. The span is whole when asked for (both ends
    are known), so inside an event loop it is written just after the caller's step: building
    it (tens of microseconds in the SDK) then never holds up the store transaction that was
    waiting for this decision's to end."""
    attributes = {
        "gen_ai.tool.name": tool,
        "opsgate.approval.decision": decision,
        "opsgate.approval.approvers": tuple(approvers),
        "opsgate.approval.required": required,
        "opsgate.approval.rule": rule,
        "opsgate.approval.wait_seconds": max(0.0, (decided_at - asked_at).total_seconds()),
    }
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        _write_approval(tool, parent, asked_at, decided_at, attributes)
    else:
        loop.call_soon(_write_approval, tool, parent, asked_at, decided_at, attributes)


def _write_approval(
    tool: str,
    parent: tuple[str, str] | None,
    asked_at: datetime,
    decided_at: datetime,
    attributes: dict[str, Any],
) -> None:
    try:
        span = _tracer().start_span(
            f"approval {tool}",
            context=None if parent is None else _parent_context(*parent),
            kind=SpanKind.INTERNAL,
            start_time=int(asked_at.timestamp() * 1e9),
            attributes=attributes,
        )
        span.end(end_time=int(decided_at.timestamp() * 1e9))
    except Exception:  # a span never fails the decision it describes
        logger.exception("the approval span of %r could not be written", tool)


@functools.lru_cache(maxsize=256)
def _parent_context(trace_id: str, span_id: str) -> Context | None:
    """The context whose current span is the stored one (a paused run's): the calls of one
    batch share it, so it is built once for them."""
    remote = _span_context(trace_id, span_id)
    return None if remote is None else trace.set_span_in_context(NonRecordingSpan(remote))


# -- ids across a pause ---------------------------------------------------------------------------


def current_ids() -> tuple[str, str] | None:
    """The current span's (trace id, span id) in hex, to store with a paused run's calls."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def links_to(ids: Iterable[tuple[str | None, str | None]]) -> list[Link]:
    """Links to the stored spans (the paused run a resumed one continues), each once."""
    links: list[Link] = []
    seen: set[tuple[str, str]] = set()
    for trace_id, span_id in ids:
        if trace_id is None or span_id is None or (trace_id, span_id) in seen:
            continue
        seen.add((trace_id, span_id))
        context = _span_context(trace_id, span_id)
        if context is not None:
            links.append(Link(context, {"opsgate.link": "resumes"}))
    return links


def _span_context(trace_id: str, span_id: str) -> SpanContext | None:
    try:
        context = SpanContext(
            int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(1)
        )
    except ValueError:
        return None
    return context if context.is_valid else None
