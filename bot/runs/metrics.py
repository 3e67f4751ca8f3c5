"""What the run service reports as it works: runs ended, decisions, tool executions, LLM errors.

A small Slack-free interface, so the service never calls prometheus-client itself:
`bot.observability.Metrics` implements it (the method names are the same), tests may record
it, and `NoObserver` is what a front end without metrics (the terminal) gets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from agent_core import Tool
from agent_core.chat_client import ChatClient, ChatOptions
from agent_core.events import ChatUpdate
from agent_core.exceptions import ChatClientError
from agent_core.messages import ChatMessage

from ..observability import classify_llm_error, log_context, log_event
from ..observability.metrics import (
    Decision,
    FeedbackValue,
    LLMErrorKind,
    RunOutcome,
    ToolOutcome,
)
from ..store import ToolCallRow

__all__ = ["NoObserver", "ObservedChatClient", "RunObserver", "note_decision", "note_run_ended"]


class RunObserver(Protocol):
    def run_finished(self, outcome: RunOutcome) -> None:
        """A run ended (a paused run has not ended: it is counted once, when it does)."""
        ...

    def decision_since(
        self, decision: Decision, posted_at: datetime, *, now: datetime | None = None
    ) -> None:
        """A card was decided; `posted_at` is when it was asked (stored, so it holds across
        replicas)."""
        ...

    def tool_finished(self, tool: str, outcome: ToolOutcome, seconds: float) -> None: ...

    def llm_error(self, kind: LLMErrorKind) -> None: ...

    def slack_api_error(self, method: str) -> None: ...

    def feedback_given(self, value: FeedbackValue) -> None:
        """Someone clicked good or bad under a final answer."""
        ...


class NoObserver:
    """Observes nothing."""

    def run_finished(self, outcome: RunOutcome) -> None:
        pass

    def decision_since(
        self, decision: Decision, posted_at: datetime, *, now: datetime | None = None
    ) -> None:
        pass

    def tool_finished(self, tool: str, outcome: ToolOutcome, seconds: float) -> None:
        pass

    def llm_error(self, kind: LLMErrorKind) -> None:
        pass

    def slack_api_error(self, method: str) -> None:
        pass

    def feedback_given(self, value: FeedbackValue) -> None:
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


def note_decision(ctx: _Observed, row: ToolCallRow, decision: Decision) -> None:
    """A card's call was decided (or expired, or cancelled); latency from when it was asked."""
    ctx.observer.decision_since(decision, row.created_at, now=ctx.clock())
    with log_context(session=row.session_id, call=row.call_id):
        log_event("decision", decision=decision, tool=row.name, by=row.decided_by)


def note_run_ended(ctx: _Observed, session_id: str, outcome: RunOutcome) -> None:
    """A run ended outside the driver: cancelled while paused, or interrupted by a restart."""
    ctx.observer.run_finished(outcome)
    with log_context(session=session_id):
        log_event("run.finished", outcome=outcome)


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
        updates = self.client.stream(messages, tools=tools, options=options)
        try:
            async for update in updates:
                yield update
        except ChatClientError as exc:
            self.observer.llm_error(classify_llm_error(exc))
            raise
        finally:
            if (aclose := getattr(updates, "aclose", None)) is not None:
                await aclose()
