"""Block Kit for feedback on a run's final answer: the feedback buttons under the answer, the
optional "what was wrong?" modal a "bad" click opens, and reading both back.

The buttons' block id names the session (`bot.slack.ids.feedback_block_id`); the modal's
`private_metadata` carries the session and the answer's message back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .ids import (
    ACTION_FEEDBACK,
    ACTION_FEEDBACK_REASON,
    BLOCK_FEEDBACK_REASON,
    CALLBACK_FEEDBACK,
    FEEDBACK_VALUES,
    feedback_block_id,
    feedback_session,
)

__all__ = [
    "FEEDBACK_REASON_MAX",
    "FeedbackClick",
    "feedback_blocks",
    "feedback_click",
    "feedback_modal",
    "feedback_reason",
]

FEEDBACK_REASON_MAX = 500
"""Longest reason the modal takes."""

FeedbackValue = Literal["good", "bad"]


def feedback_blocks(session_id: str) -> list[dict[str, Any]]:
    """The feedback buttons that end a final answer."""
    good, bad = FEEDBACK_VALUES
    return [
        {
            "type": "context_actions",
            "block_id": feedback_block_id(session_id),
            "elements": [
                {
                    "type": "feedback_buttons",
                    "action_id": ACTION_FEEDBACK,
                    "positive_button": {
                        "text": {"type": "plain_text", "text": "Good answer"},
                        "value": good,
                        "accessibility_label": "This answer was useful",
                    },
                    "negative_button": {
                        "text": {"type": "plain_text", "text": "Bad answer"},
                        "value": bad,
                        "accessibility_label": "This answer was not useful",
                    },
                }
            ],
        }
    ]


@dataclass(frozen=True, slots=True)
class FeedbackClick:
    """A click on the feedback buttons: who, good or bad, about which session's answer."""

    session_id: str
    value: FeedbackValue
    message_ts: str


def feedback_click(action: Mapping[str, Any], message_ts: str) -> FeedbackClick | None:
    """The click, or None when the action is not one of our feedback buttons' values."""
    session = feedback_session(action.get("block_id"))
    value = action.get("value")
    if session is None or value not in FEEDBACK_VALUES:
        return None
    return FeedbackClick(session, "good" if value == "good" else "bad", message_ts)


def feedback_modal(click: FeedbackClick) -> dict[str, Any]:
    """The optional "what was wrong?" modal; submitting it empty is fine."""
    metadata = json.dumps({"session": click.session_id, "ts": click.message_ts})
    return {
        "type": "modal",
        "callback_id": CALLBACK_FEEDBACK,
        "private_metadata": metadata,
        "title": {"type": "plain_text", "text": "What was wrong?"},
        "submit": {"type": "plain_text", "text": "Send"},
        "close": {"type": "plain_text", "text": "Skip"},
        "blocks": [
            {
                "type": "input",
                "block_id": BLOCK_FEEDBACK_REASON,
                "optional": True,
                "label": {"type": "plain_text", "text": "What should it have done? (optional)"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": ACTION_FEEDBACK_REASON,
                    "multiline": True,
                    "max_length": FEEDBACK_REASON_MAX,
                },
            }
        ],
    }


def feedback_reason(view: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(session id, message ts, reason) from a submitted modal; None when it is not ours or
    the reason is empty."""
    try:
        metadata = json.loads(str(view.get("private_metadata") or ""))
    except ValueError:
        return None
    if not isinstance(metadata, dict):
        return None
    session, ts = metadata.get("session"), metadata.get("ts")
    state = view.get("state")
    values = state.get("values") if isinstance(state, Mapping) else None
    block = values.get(BLOCK_FEEDBACK_REASON) if isinstance(values, Mapping) else None
    field = block.get(ACTION_FEEDBACK_REASON) if isinstance(block, Mapping) else None
    reason = field.get("value") if isinstance(field, Mapping) else None
    if not (isinstance(session, str) and isinstance(ts, str) and isinstance(reason, str)):
        return None
    reason = reason.strip()[:FEEDBACK_REASON_MAX]
    return (session, ts, reason) if reason else None
