"""Block Kit for approval cards and the reject modal: pure functions from the run service's card
view models (`bot.runs.cards`) to Slack dicts.

Everything shown comes from the ledger row the bot stored at pause time; the buttons carry only
the ledger id (see "Binding" in `docs/architecture.md`). Arguments and descriptions are untrusted
and reach mrkdwn only through `bot.slack._text`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    HeaderBlock,
    InputBlock,
    PlainTextInputElement,
    PlainTextObject,
)
from slack_sdk.models.views import View

from ..runs.cards import CardCall, CardOutcome, OutcomeStatus
from ._answers import lock_text
from ._binding import decision_block_id
from ._card_body import arguments_blocks, card_body, section, slack_date
from ._forms import edited_note, extra_buttons, reason_select, selected_reason
from ._text import code_span, escape_cut, user_mention

__all__ = [
    "ACTION_APPROVE",
    "ACTION_CANCEL",
    "ACTION_REASON",
    "ACTION_REJECT",
    "BLOCK_ACTIONS",
    "BLOCK_REASON",
    "CALLBACK_REJECT",
    "approval_card",
    "card_text",
    "decided_card",
    "decided_text",
    "overflow",
    "reason_from_view",
    "reject_modal",
]

ACTION_APPROVE = "opsgate_approve"
ACTION_REJECT = "opsgate_reject"
ACTION_CANCEL = "opsgate_cancel"
CALLBACK_REJECT = "opsgate_reject_modal"
BLOCK_REASON = "reason"
ACTION_REASON = "reason_input"
BLOCK_ACTIONS = "opsgate_decision"

BUTTON_VALUE_MAX = 2000
REASON_MAX = 1000
"""Longest reason the modal accepts (raw characters)."""
_REASON_SHOWN_MAX = 1500

_HEADERS: Mapping[OutcomeStatus, str] = {
    "approved": "✅ Approved",
    "rejected": "❌ Rejected",
    "expired": "⌛ Expired",
    "cancelled": "🚫 Cancelled",
}


def approval_card(call: CardCall, *, arg_limit: int = 2500) -> list[dict[str, Any]]:
    """The pending card: what wants to run, who asked, and Approve / Reject buttons (no Approve
    when the card is `locked`: it says why)."""
    _check_ledger_id(call.ledger_id)
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text="Approval needed"))]
    blocks += card_body(call, arg_limit)
    blocks += edited_note(call)
    blocks += _policy_note(call)
    approve = ButtonElement(
        text=PlainTextObject(text="Approve"),
        action_id=ACTION_APPROVE,
        value=call.ledger_id,
        style="primary",
    )
    if call.locked is not None:
        blocks.append(section(lock_text(call.locked)))
    blocks.append(
        ActionsBlock(
            block_id=decision_block_id(call.digest),
            elements=[
                *([approve] if call.locked is None else []),
                ButtonElement(
                    text=PlainTextObject(text="Reject"),
                    action_id=ACTION_REJECT,
                    value=call.ledger_id,
                    style="danger",
                ),
                # Edit and Allow approve too: a card that may not be approved offers neither.
                *(extra_buttons(call) if call.locked is None else []),
                ButtonElement(
                    text=PlainTextObject(text="Cancel run"),
                    action_id=ACTION_CANCEL,
                    value=call.ledger_id,
                    confirm=ConfirmObject(
                        title="Cancel the whole run?",
                        text=PlainTextObject(
                            text="Every call waiting here is rejected, nothing of this batch "
                            "runs, and the run ends."
                        ),
                        confirm="Cancel run",
                        deny="Keep waiting",
                    ),
                ),
            ],
        )
    )
    return _to_dicts(blocks)


def decided_card(
    call: CardCall, outcome: CardOutcome, *, arg_limit: int = 2500
) -> list[dict[str, Any]]:
    """The card after the decision: the same information, no buttons, who decided, when, why."""
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text=_HEADERS[outcome.status]))]
    blocks += card_body(call, arg_limit)
    blocks += edited_note(call)
    blocks += _policy_note(call)
    blocks.append(section(_outcome_text(outcome)))
    return _to_dicts(blocks)


def overflow(call: CardCall, arg_limit: int = 2500) -> str | None:
    """The full arguments as text when the card had to cut them, else None."""
    return arguments_blocks(call.arguments, arg_limit).full_text


def card_text(call: CardCall) -> str:
    """Notification / fallback text of the pending card."""
    return f"Approval needed: {code_span(call.tool)} wants to run"


def decided_text(call: CardCall, outcome: CardOutcome) -> str:
    """Notification / fallback text of the decided card."""
    who = f" by {user_mention(outcome.decided_by)}" if outcome.decided_by else ""
    return f"{outcome.status.capitalize()}{who}: {code_span(call.tool)}"


def reject_modal(ledger_id: str, reasons: Sequence[str] = ()) -> dict[str, Any]:
    """The modal a Reject click opens; `private_metadata` carries the ledger id back. `reasons`
    (policy `reject_reasons`) are offered in an optional select, next to the free text."""
    _check_ledger_id(ledger_id)
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


# -- machinery ---------------------------------------------------------------------------------


def _policy_note(call: CardCall) -> list[Block]:
    """The policy rule that gated the call, and why (the operator's words, escaped)."""
    if call.policy_rule is None:
        return []
    why = f": {escape_cut(call.justification, 300)}" if call.justification else ""
    return [section(f":scroll: Policy {code_span(call.policy_rule, 160)}{why}")]


def _outcome_text(outcome: CardOutcome) -> str:
    verb = outcome.status.capitalize()
    who = f" by {user_mention(outcome.decided_by)}" if outcome.decided_by else ""
    text = f"*{verb}*{who} · {slack_date(outcome.decided_at)}"
    if outcome.status == "expired":
        text += ": no decision in time, the call was not run"
    if outcome.reason and outcome.reason.strip():
        text += f"\n*Reason:* {escape_cut(outcome.reason.strip(), _REASON_SHOWN_MAX)}"
    return text


def _check_ledger_id(ledger_id: str) -> None:
    if not ledger_id or len(ledger_id) > BUTTON_VALUE_MAX:
        raise ValueError(f"ledger id must be 1..{BUTTON_VALUE_MAX} characters, got {ledger_id!r}")


def _to_dicts(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    if len(blocks) > 50:
        raise ValueError(f"a message holds at most 50 blocks, got {len(blocks)}")
    return [block.to_dict() for block in blocks]
