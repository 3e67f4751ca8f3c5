"""Telling the observer and the event log what the service decided: one place, so the service's
steps stay one line each (`bot.runs.observer` says why there is an observer)."""

from __future__ import annotations

from ..observability import log_context, log_event
from ..observability.metrics import Decision, RunOutcome
from ..store import ToolCallRow
from ._context import RunContext

__all__ = ["note_decision", "note_run_ended"]


def note_decision(ctx: RunContext, row: ToolCallRow, decision: Decision) -> None:
    """A card's call was decided (or expired, or cancelled); latency from when it was asked."""
    ctx.observer.decision_since(decision, row.created_at, now=ctx.clock())
    with log_context(session=row.session_id, call=row.call_id):
        log_event("decision", decision=decision, tool=row.name, by=row.decided_by)


def note_run_ended(ctx: RunContext, session_id: str, outcome: RunOutcome) -> None:
    """A run ended outside the driver: cancelled while paused, or interrupted by a restart."""
    ctx.observer.run_finished(outcome)
    with log_context(session=session_id):
        log_event("run.finished", outcome=outcome)
