"""Block Kit and mrkdwn for change freezes and break-glass: the frozen card's section and its
"Break glass" button, the decided card's "Mark reviewed", the reason modal, the announcements,
and the lines help and the Home tab add. Kept apart from `bot.slack.cards`, which calls in.

Freeze messages and break-glass reasons are people's text: escaped through `bot.slack.mrkdwn`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    InputBlock,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.blocks.basic_components import MarkdownTextObject
from slack_sdk.models.views import View

from ..runs.notices import BreakGlassUsed, FreezeAnnounced, FreezeAnswer
from ..runs.views import CardCall, FreezeInfo, GlassInfo
from .ids import (
    ACTION_BREAK_GLASS,
    ACTION_GLASS_REASON,
    ACTION_REVIEWED,
    BLOCK_GLASS_REASON,
    CALLBACK_BREAK_GLASS,
    check_ledger_id,
)
from .mrkdwn import code_span, escape_cut, slack_date, user_mention

__all__ = [
    "REASON_MAX",
    "break_glass_button",
    "break_glass_modal",
    "freeze_lines",
    "freeze_notice_text",
    "frozen_blocks",
    "glass_reason",
    "review_blocks",
    "unreviewed_lines",
]

REASON_MAX = 1000


def frozen_blocks(call: CardCall) -> list[Block]:
    """What a frozen card says instead of its Approve: which freeze, until when, why."""
    if call.frozen is None:
        return []
    until = f" until {slack_date(call.frozen_until)}" if call.frozen_until is not None else ""
    why = f": {escape_cut(call.freeze_message, 500)}" if call.freeze_message else ""
    text = (
        f":snowflake: *Change freeze* {code_span(call.frozen)}{until}{why}. Nothing may be "
        "approved, edited or allowed until it ends; this card gets its buttons back then."
    )
    if call.break_glass:
        text += " In an emergency, a break-glass approver may break glass (a reason is needed)."
    return [SectionBlock(text=MarkdownTextObject(text=text))]


def break_glass_button(call: CardCall) -> list[ButtonElement]:
    if call.frozen is None or not call.break_glass:
        return []
    return [
        ButtonElement(
            text=PlainTextObject(text="Break glass"),
            action_id=ACTION_BREAK_GLASS,
            value=call.ledger_id,
            style="danger",
        )
    ]


def review_blocks(call: CardCall) -> list[Block]:
    """A decided card whose glass was broken: who and why, and "Mark reviewed" until then."""
    glass = call.glass
    if glass is None:
        return []
    text = (
        f":rotating_light: Glass broken by {user_mention(glass.broken_by)} during "
        f"{code_span(glass.freeze)}: {escape_cut(glass.reason, REASON_MAX)}"
    )
    if glass.reviewed_by is not None:
        text += f"\nReviewed by {user_mention(glass.reviewed_by)}."
        return [SectionBlock(text=MarkdownTextObject(text=text))]
    button = ButtonElement(
        text=PlainTextObject(text="Mark reviewed"), action_id=ACTION_REVIEWED, value=call.ledger_id
    )
    return [SectionBlock(text=MarkdownTextObject(text=text)), ActionsBlock(elements=[button])]


def break_glass_modal(ledger_id: str, digest: str | None) -> dict[str, Any]:
    """The reason form "Break glass" opens; `private_metadata` is the ledger id and the digest
    the clicked card showed."""
    check_ledger_id(ledger_id)
    view = View(
        type="modal",
        callback_id=CALLBACK_BREAK_GLASS,
        private_metadata=f"{ledger_id} {digest or ''}".strip(),
        title=PlainTextObject(text="Break glass"),
        submit=PlainTextObject(text="Break glass"),
        close=PlainTextObject(text="Back"),
        blocks=[
            SectionBlock(
                text=MarkdownTextObject(
                    text="A change freeze is in force. Breaking glass runs this call now: the "
                    "channel is told who did it and why, it is audited, and another approver "
                    "reviews it afterwards."
                )
            ),
            InputBlock(
                block_id=BLOCK_GLASS_REASON,
                label=PlainTextObject(text="Reason"),
                element=PlainTextInputElement(
                    action_id=ACTION_GLASS_REASON, multiline=True, max_length=REASON_MAX
                ),
            ),
        ],
    )
    result: dict[str, Any] = view.to_dict()
    return result


def glass_reason(view: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """(ledger id, digest, reason) from a submitted break-glass form."""
    ledger_id, _, digest = str(view.get("private_metadata") or "").partition(" ")
    state = view.get("state")
    values = state.get("values") if isinstance(state, Mapping) else None
    block = values.get(BLOCK_GLASS_REASON) if isinstance(values, Mapping) else None
    field = block.get(ACTION_GLASS_REASON) if isinstance(block, Mapping) else None
    value = field.get("value") if isinstance(field, Mapping) else None
    reason = value.strip()[:REASON_MAX] if isinstance(value, str) else ""
    return ledger_id, digest or None, reason


def freeze_notice_text(notice: FreezeAnnounced | BreakGlassUsed | FreezeAnswer) -> str:
    match notice:
        case FreezeAnnounced(started=True):
            by = f" by {user_mention(notice.started_by)}" if notice.started_by else ""
            why = f": {escape_cut(notice.message, 500)}" if notice.message else ""
            return (
                f":snowflake: *Change freeze started*{by}: {code_span(notice.label)} until "
                f"{slack_date(notice.until)}{why}. Gated calls get no Approve until then."
            )
        case FreezeAnnounced():
            return (
                f":sunny: *Change freeze ended*: {code_span(notice.label)}. Cards waiting here "
                "have their buttons again."
            )
        case BreakGlassUsed():
            link = f" (<{notice.permalink}|the card>)" if notice.permalink else ""
            return (
                f":rotating_light: *BREAK GLASS* :rotating_light: {user_mention(notice.by)} "
                f"approved {code_span(notice.tool)} during the change freeze "
                f"{code_span(notice.freeze)}{link}. Reason: {escape_cut(notice.reason, REASON_MAX)}"
            )
        case FreezeAnswer(text=text):
            return escape_cut(text, 2000)


def freeze_lines(freezes: Sequence[FreezeInfo]) -> list[str]:
    """One line per freeze in force (help and the Home tab)."""
    lines = []
    for freeze in freezes:
        why = f": {escape_cut(freeze.message, 300)}" if freeze.message else ""
        lines.append(f":snowflake: {code_span(freeze.label)} until {slack_date(freeze.until)}{why}")
    return lines


def unreviewed_lines(uses: Sequence[GlassInfo]) -> list[str]:
    return [
        f":rotating_light: {user_mention(g.broken_by)} broke glass in <#{g.channel}> during "
        f"{code_span(g.freeze)}: {escape_cut(g.reason, 300)}"
        for g in uses
    ]
