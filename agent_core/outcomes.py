"""Why a tool call did not run (or ran other than the model asked), as typed values.

Every front end (Slack, the terminal, the store's recovery) says what happened to a call with
one of these; `render_outcome` is the one place that turns it into the text the model reads in
the call's `tool` message. Nobody parses that text back: consumers `match` on the value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CallOutcome",
    "Cancelled",
    "Edited",
    "Expired",
    "Interrupted",
    "NotRun",
    "Rejected",
    "edited_result",
    "render_outcome",
]


@dataclass(frozen=True, slots=True)
class Rejected:
    """A human said no. `by` is how the front end names that person to the model."""

    reason: str | None = None
    by: str | None = None
    kind: Literal["rejected"] = "rejected"


@dataclass(frozen=True, slots=True)
class Expired:
    """No decision came within the time limit (`ttl`, in words such as "15m")."""

    ttl: str = "the time limit"
    kind: Literal["expired"] = "expired"


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The whole run was cancelled while this gated call waited for a decision."""

    by: str | None = None
    kind: Literal["cancelled"] = "cancelled"


@dataclass(frozen=True, slots=True)
class NotRun:
    """A call that needed no decision (or was approved) but never ran: its run was cancelled
    (`cancelled_by` set) or the process restarted before it started."""

    cancelled_by: str | None = None
    kind: Literal["not_run"] = "not_run"


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The process stopped while the call was running: its outcome is unknown, and it is never
    run again (it may have had effects)."""

    kind: Literal["interrupted"] = "interrupted"


@dataclass(frozen=True, slots=True)
class Edited:
    """A human changed the arguments before approving: the call ran with `arguments`, not with
    the model's `original`. Rendered as a preface to the call's real result (`edited_result`)."""

    by: str | None
    original: dict[str, Any]
    arguments: dict[str, Any]
    kind: Literal["edited"] = "edited"


CallOutcome = Rejected | Expired | Cancelled | NotRun | Interrupted
"""What the model is told instead of a result: the call did not run."""


def render_outcome(outcome: CallOutcome | Edited) -> str:
    """The model-facing text of an outcome; the only place this wording lives."""
    match outcome:
        case Rejected(reason=reason, by=by):
            text = f"Rejected: {reason or 'User denied'}"
            return f"{text} (rejected by {by})" if by else text
        case Expired(ttl=ttl):
            return f"Expired: no decision within {ttl}; the call was not run"
        case Cancelled(by=by):
            return f"Rejected: cancelled by {by or 'a user'}"
        case NotRun(cancelled_by=None):
            return "Not run: OpsGate restarted before this call ran."
        case NotRun(cancelled_by=by):
            return f"Not run: the run was cancelled by {by}"
        case Interrupted():
            return (
                "Interrupted: OpsGate stopped while this call was running; "
                "its outcome is unknown and it was not run again."
            )
        case Edited(by=by, arguments=arguments):
            shown = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
            who = f" by {by}" if by else ""
            return f"The call was edited by a human{who} before approval; it ran with {shown}."


def edited_result(edit: Edited, result: str) -> str:
    """The tool message of an edited call: who changed it and the arguments that ran, then the
    result, so the model knows its own arguments did not run."""
    return f"{render_outcome(edit)}\nResult:\n{result}"
