"""What the run service reports as it works: runs ended, decisions, tool executions, LLM errors.

A small Slack-free interface, so the service never calls prometheus-client itself:
`bot.observability.Metrics` implements it (the method names are the same), tests may record
it, and `NoObserver` is what a front end without metrics (the terminal) gets.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from opentelemetry.trace import Span, Status, StatusCode

from agent_core import Tool, ToolCall
from agent_core.chat_client import ChatClient, ChatOptions
from agent_core.exceptions import ChatClientError
from agent_core.messages import ChatMessage, ChatUpdate, Finish, TextDelta

from ..observability import classify_llm_error, log_context, log_event, tracing
from ..observability.metrics import (
    Decision,
    FeedbackValue,
    LLMErrorKind,
    RunOutcome,
    ShadowDirection,
    ToolOutcome,
)
from ..policy import Policy
from ..store import RecoveredSession, ToolCallRow

__all__ = [
    "NoObserver",
    "ObservedChatClient",
    "RunObserver",
    "note_decision",
    "note_recovered",
    "note_run_ended",
]

logger = logging.getLogger("opsgate.runs")


class RunObserver(Protocol):
    def run_finished(self, outcome: RunOutcome) -> None:
        """A run ended (a paused run has not ended: it is counted once, when it does)."""
        ...

    def decision_since(
        self,
        decision: Decision,
        posted_at: datetime,
        *,
        now: datetime | None = None,
        rule: str = "default",
    ) -> None:
        """A card was decided; `posted_at` is when it was asked (stored, so it holds across
        replicas)."""
        ...

    def tool_finished(self, tool: str, outcome: ToolOutcome, seconds: float) -> None: ...

    def escalated(self, rule: str, step: int) -> None:
        """A waiting call passed step `step` of its escalation ladder (`rule`: its rule)."""
        ...

    def reminded(self, messages: int) -> None:
        """`messages` reminders went to approvers."""
        ...

    def llm_error(self, kind: LLMErrorKind) -> None: ...

    def slack_api_error(self, method: str) -> None: ...

    def feedback_given(self, value: FeedbackValue, *, replaces: FeedbackValue | None) -> None:
        """Someone voted good or bad on a final answer (`replaces`: the vote they took back)."""
        ...

    def shadow_differs(self, direction: ShadowDirection, rule: str) -> None:
        """The shadow policy judged a live call otherwise (`bot.runs.context`)."""
        ...


class NoObserver:
    """Observes nothing."""

    def run_finished(self, outcome: RunOutcome) -> None:
        pass

    def decision_since(
        self,
        decision: Decision,
        posted_at: datetime,
        *,
        now: datetime | None = None,
        rule: str = "default",
    ) -> None:
        pass

    def escalated(self, rule: str, step: int) -> None:
        pass

    def reminded(self, messages: int) -> None:
        pass

    def tool_finished(self, tool: str, outcome: ToolOutcome, seconds: float) -> None:
        pass

    def llm_error(self, kind: LLMErrorKind) -> None:
        pass

    def slack_api_error(self, method: str) -> None:
        pass

    def feedback_given(self, value: FeedbackValue, *, replaces: FeedbackValue | None) -> None:
        pass

    def shadow_differs(self, direction: ShadowDirection, rule: str) -> None:
        pass


# -- observe -------------------------------------------------------------------------------------
# Telling the observer and the event log what the service decided: one place, so the service's
# steps stay one line each (`bot.runs.metrics` says why there is an observer).


class _Observed(Protocol):
    """What the notes need of the run service's `RunContext` (which has more)."""

    @property
    def observer(self) -> RunObserver: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    @property
    def policy(self) -> Policy: ...


def note_decision(ctx: _Observed, row: ToolCallRow, decision: Decision) -> None:
    """A card's call was decided (or expired, or cancelled); latency from when it was asked,
    and the approval's span in the paused run's trace."""
    now = ctx.clock()
    ctx.observer.decision_since(decision, row.created_at, now=now, rule=_rule(ctx, row))
    if tracing.tracing_on():
        _approval_span(ctx, row, decision, now)
    with log_context(session=row.session_id, call=row.call_id):
        log_event("decision", decision=decision, tool=row.name, by=row.decided_by)


def _rule(ctx: _Observed, row: ToolCallRow) -> str:
    """The call's policy rule (`tools.<tool>.rules[<i>]`), or "default", for the metrics."""
    try:
        call = ToolCall(id=row.call_id, name=row.name, arguments=row.arguments)
        return ctx.policy.decide(row.name, call).policy_rule or "default"
    except Exception:  # a metric label never fails a decision
        return "default"


def _approval_span(ctx: _Observed, row: ToolCallRow, decision: Decision, now: datetime) -> None:
    """The approval's span; a failure here is logged, never the decision's."""
    try:
        call = ToolCall(id=row.call_id, name=row.name, arguments=row.arguments)
        tracing.approval_span(
            row.name,
            parent=(row.trace_id, row.span_id) if row.trace_id and row.span_id else None,
            asked_at=row.created_at,
            decided_at=row.decided_at or now,
            decision=decision,
            approvers=row.approvals or ((row.decided_by,) if row.decided_by else ()),
            required=ctx.policy.required_approvals_for(row.card_channel),
            rule=ctx.policy.rule_for(row.name, call),
        )
    except Exception:
        logger.exception("the approval span of %s could not be written", row.id)


def note_run_ended(ctx: _Observed, session_id: str, outcome: RunOutcome) -> None:
    """A run ended outside the driver: cancelled while paused, or interrupted by a restart."""
    ctx.observer.run_finished(outcome)
    with log_context(session=session_id):
        log_event("run.finished", outcome=outcome)


def note_recovered(ctx: _Observed, recovered: RecoveredSession) -> None:
    """A run cut short by a restart (this process's or a lapsed replica's): it ended
    interrupted, and so did each call that was running (its outcome is unknown)."""
    note_run_ended(ctx, recovered.session.id, "interrupted")
    for row in recovered.interrupted:
        ctx.observer.tool_finished(row.name, "interrupted", 0.0)


# -- observed ------------------------------------------------------------------------------------
# The agent's chat client, wrapped so that the run service's observer hears of every failed
# model request with its typed cause (the loop keeps only the message). Tool executions need no
# wrapper: `agent_core` reports each one's duration on its `ToolResult`.


class ObservedChatClient:
    """A `ChatClient` that reports each failed model request by kind before re-raising it."""

    def __init__(self, client: ChatClient, observer: RunObserver) -> None:
        self.client = client
        self.observer = observer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)  # `check()`, `model`, …

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool] = (),
        options: ChatOptions | None = None,
    ) -> AsyncIterator[ChatUpdate]:
        model = str(getattr(self.client, "model", "") or "model")
        span = tracing.chat_span(model)
        content = span.is_recording() and tracing.capture_content()
        if content:
            span.set_attribute("gen_ai.input.messages", tracing.message_texts(messages))
        answer: list[str] = []
        updates = self.client.stream(messages, tools=tools, options=options)
        try:
            async for update in updates:
                if isinstance(update, Finish):
                    _finished_chat(span, model, update)
                    if content:
                        reply = ChatMessage.assistant("".join(answer))
                        span.set_attribute("gen_ai.output.messages", tracing.message_texts([reply]))
                elif content and isinstance(update, TextDelta):
                    answer.append(update.text)
                yield update
        except ChatClientError as exc:
            kind = classify_llm_error(exc)
            self.observer.llm_error(kind)
            span.set_status(Status(StatusCode.ERROR))
            span.set_attribute("error.type", kind)
            raise
        finally:
            span.end()
            if (aclose := getattr(updates, "aclose", None)) is not None:
                await aclose()


def _finished_chat(span: Span, model: str, finish: Finish) -> None:
    if not span.is_recording():
        return
    span.set_attribute("gen_ai.response.model", model)
    span.set_attribute("gen_ai.response.finish_reasons", [str(finish.finish_reason)])
    if finish.usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", finish.usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", finish.usage.completion_tokens)
