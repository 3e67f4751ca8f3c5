"""What the run service reports as it works: runs ended, decisions, tool executions, LLM errors.

A small Slack-free interface, so the service never calls prometheus-client itself:
`bot.observability.Metrics` implements it (the method names are the same), tests may record
it, and `NoObserver` is what a front end without metrics (the terminal) gets.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from ..observability.metrics import Decision, LLMErrorKind, RunOutcome, ToolOutcome

__all__ = ["NoObserver", "RunObserver"]


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
