"""Block Kit for the modals people fill in, and reading them back from a submitted view: those a
card's buttons open (the reject modal with its reason select, the edit modal, the Allow dialog),
and the "what was wrong?" modal of feedback on a final answer, with the feedback buttons under
the answer that open it.

Buttons carry only the ledger id ("Binding" in `docs/architecture.md`); the modal's
`private_metadata` carries it back. Prefilled values are plain text inputs, which Slack shows
literally; everything in mrkdwn goes through `bot.slack.mrkdwn`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    RadioButtonsElement,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from ..runs.views import AllowForm, EditForm
from .cards import (
    section,
)
from .ids import (
    ACTION_ALLOW_SHAPE,
    ACTION_FEEDBACK,
    ACTION_FEEDBACK_REASON,
    ACTION_FIELD,
    ACTION_REASON,
    ACTION_REASON_CHOICE,
    BLOCK_ALLOW_SHAPE,
    BLOCK_FEEDBACK_REASON,
    BLOCK_REASON,
    BLOCK_REASON_CHOICE,
    CALLBACK_ALLOW,
    CALLBACK_EDIT,
    CALLBACK_FEEDBACK,
    CALLBACK_REJECT,
    FEEDBACK_VALUES,
    check_ledger_id,
    feedback_block_id,
    feedback_session,
)
from .mrkdwn import (
    code_span,
    escape_cut,
    truncate,
)

__all__ = [
    "FEEDBACK_REASON_MAX",
    "FeedbackClick",
    "allow_choice",
    "allow_modal",
    "edit_modal",
    "edit_values",
    "feedback_blocks",
    "feedback_click",
    "feedback_modal",
    "feedback_reason",
    "reason_from_view",
    "reason_select",
    "reject_modal",
    "selected_reason",
]


_INPUT_MAX = 3000
"""Slack's longest plain_text_input value."""


def edit_modal(form: EditForm) -> dict[str, Any]:
    """The edit modal: for `run_command` one input holding exactly the command; otherwise one
    input per argument (text as is, other values as JSON)."""
    blocks: list[Block] = [
        section(
            f"Change the arguments of {code_span(form.tool)}. Submitting approves the edited "
            "call; approvals of the old arguments no longer count."
        )
    ]
    for field in form.fields:
        element = PlainTextInputElement(
            action_id=ACTION_FIELD,
            multiline=not form.command,
            max_length=_INPUT_MAX,
            # Never cut: the run service offers no form for a longer value (`EDIT_TEXT_MAX`).
            initial_value=field.value or None,
        )
        label = "Command" if form.command else "Arguments (JSON)" if form.as_json else field.name
        blocks.append(
            InputBlock(
                block_id=field.name,
                label=PlainTextObject(text=truncate(label, 2000)),
                element=element,
                optional=not field.required,
                hint=PlainTextObject(text=truncate(field.description, 2000))
                if field.description
                else None,
            )
        )
    view = View(
        type="modal",
        callback_id=CALLBACK_EDIT,
        private_metadata=form.ledger_id,
        title=PlainTextObject(text="Edit tool call"),
        submit=PlainTextObject(text="Run edited"),
        close=PlainTextObject(text="Back"),
        blocks=blocks,
    )
    result: dict[str, Any] = view.to_dict()
    return result


def edit_values(view: Mapping[str, Any]) -> dict[str, str | None]:
    """The edit modal's inputs by argument name (None for an empty one)."""
    state = view.get("state")
    values = state.get("values") if isinstance(state, Mapping) else None
    out: dict[str, str | None] = {}
    for block_id, actions in (values or {}).items():
        field = actions.get(ACTION_FIELD) if isinstance(actions, Mapping) else None
        value = field.get("value") if isinstance(field, Mapping) else None
        out[str(block_id)] = value if isinstance(value, str) else None
    return out


def reason_select(reasons: Sequence[str]) -> list[Block]:
    """The optional select of predefined reasons (none when the list is empty)."""
    if not reasons:
        return []
    return [
        InputBlock(
            block_id=BLOCK_REASON_CHOICE,
            label=PlainTextObject(text="Reason"),
            optional=True,
            element=StaticSelectElement(
                action_id=ACTION_REASON_CHOICE,
                placeholder=PlainTextObject(text="Pick one (optional)"),
                options=[Option(value=str(i), label=r) for i, r in enumerate(reasons[:100])],
            ),
        )
    ]


def selected_reason(values: Any) -> str | None:
    """The label of the picked reason in a submitted reject modal's state values."""
    block = values.get(BLOCK_REASON_CHOICE) if isinstance(values, Mapping) else None
    field = block.get(ACTION_REASON_CHOICE) if isinstance(block, Mapping) else None
    option = field.get("selected_option") if isinstance(field, Mapping) else None
    text = option.get("text") if isinstance(option, Mapping) else None
    label = text.get("text") if isinstance(text, Mapping) else None
    return label.strip() if isinstance(label, str) and label.strip() else None


REASON_MAX = 1000
"""Longest reason the modal accepts (raw characters)."""


def reject_modal(ledger_id: str, reasons: Sequence[str] = ()) -> dict[str, Any]:
    """The modal a Reject click opens; `private_metadata` carries the ledger id back. `reasons`
    (policy `reject_reasons`) are offered in an optional select, next to the free text."""
    check_ledger_id(ledger_id)
    view = View(
        type="modal",
        callback_id=CALLBACK_REJECT,
        private_metadata=ledger_id,
        title=PlainTextObject(text="Reject tool call"),
        submit=PlainTextObject(text="Reject"),
        close=PlainTextObject(text="Cancel"),
        blocks=[
            section("The call will not run. The agent is told it was rejected, and why."),
            *reason_select(reasons),
            InputBlock(
                block_id=BLOCK_REASON,
                label=PlainTextObject(text="Reason"),
                optional=True,
                element=PlainTextInputElement(
                    action_id=ACTION_REASON,
                    multiline=True,
                    max_length=REASON_MAX,
                    placeholder=PlainTextObject(text="Why not? (optional)"),
                ),
            ),
        ],
    )
    result: dict[str, Any] = view.to_dict()
    return result


def reason_from_view(view: Mapping[str, Any]) -> str | None:
    """The reason given in `reject_modal`, from a submitted view: `<label>: <free text>`, or
    whichever of the two was given; None when neither was."""
    state = view.get("state")
    values = state.get("values") if isinstance(state, Mapping) else None
    block = values.get(BLOCK_REASON) if isinstance(values, Mapping) else None
    field = block.get(ACTION_REASON) if isinstance(block, Mapping) else None
    value = field.get("value") if isinstance(field, Mapping) else None
    text = value.strip()[:REASON_MAX] if isinstance(value, str) else ""
    label = selected_reason(values)
    return ": ".join(part for part in (label, text) if part) or None


_CHOICE_MAX = 75
"""The longest shape a choice of the Allow dialog shows whole (a radio option's text)."""


def allow_modal(form: AllowForm) -> dict[str, Any]:
    """The Allow dialog: one radio choice of shapes (the default first), and what each covers
    and does not, generated from the call. `private_metadata` is the ledger id and the digest
    the dialog was drawn for, so a choice made on an edited call counts for nothing."""
    # Only the shapes a choice shows whole are offered (what is allowed must be what was
    # shown); each keeps its index among the form's choices. The card offers the dialog only
    # where its scope fits (`bot.slack.cards.extra_buttons`); should no shape fit, the first
    # is offered cut rather than no dialog at all.
    shown = [(i, c) for i, c in enumerate(form.choices) if len(c.label) <= _CHOICE_MAX][:10]
    shown = shown or [(0, form.choices[0])]
    options = [
        Option(value=str(i), label=truncate(choice.label, _CHOICE_MAX)) for i, choice in shown
    ]
    examples = [
        MarkdownTextObject(
            text=escape_cut(
                f"{choice.label}: covers {'; '.join(choice.matching)}. "
                f"Not: {'; '.join(choice.not_matching)}.",
                1900,
            )
        )
        for _, choice in shown
    ]
    blocks: list[Block] = [
        section(
            f"This call runs now, and in this channel calls of the shape you choose run "
            f"without a card for {form.window}. Each run is posted and audited."
        ),
        InputBlock(
            block_id=BLOCK_ALLOW_SHAPE,
            label=PlainTextObject(text="Allow calls of"),
            element=RadioButtonsElement(
                action_id=ACTION_ALLOW_SHAPE, options=options, initial_option=options[0]
            ),
        ),
        ContextBlock(elements=examples),
    ]
    view = View(
        type="modal",
        callback_id=CALLBACK_ALLOW,
        private_metadata=f"{form.ledger_id} {form.digest}",
        title=PlainTextObject(text=truncate(f"Allow for {form.window}", 24)),
        submit=PlainTextObject(text="Allow"),
        close=PlainTextObject(text="Back"),
        blocks=blocks,
    )
    result: dict[str, Any] = view.to_dict()
    return result


def allow_choice(view: Mapping[str, Any]) -> tuple[str, str | None, int | None]:
    """The ledger id, digest and chosen shape (its index) of a submitted Allow dialog."""
    ledger_id, _, digest = str(view.get("private_metadata") or "").partition(" ")
    state = view.get("state")
    values = state.get("values") if isinstance(state, Mapping) else None
    block = values.get(BLOCK_ALLOW_SHAPE) if isinstance(values, Mapping) else None
    field = block.get(ACTION_ALLOW_SHAPE) if isinstance(block, Mapping) else None
    option = field.get("selected_option") if isinstance(field, Mapping) else None
    value = option.get("value") if isinstance(option, Mapping) else None
    choice = int(value) if isinstance(value, str) and value.isdigit() else None
    return ledger_id, digest or None, choice


# -- feedback on a final answer ----------------------------------------------------------------
# Block Kit for feedback on a run's final answer: the feedback buttons under the answer, the
# optional "what was wrong?" modal a "bad" click opens, and reading both back.
#
# The buttons' block id names the session (`bot.slack.ids.feedback_block_id`); the modal's
# `private_metadata` carries the session and the answer's message back.


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
