"""Block Kit for approval cards, full and minimal, with their Edit and "Allow for" buttons and the
line naming an MCP server's tool: pure functions from the run service's card view models
(`bot.runs.views`) to Slack dicts; and a card's redraw, the outbox's renderer of the store's
`CARD_REDRAW` intents (`card_renderer`), drawn with the same builders. What the card says
about the call (why it is there, what it still needs, its preview) is in `bot.slack.card_notes`.

Everything shown comes from the ledger row the bot stored at pause time; the buttons carry only
the ledger id (see "Binding" in `docs/architecture.md`). Arguments and descriptions are untrusted
and reach mrkdwn only through `bot.slack.mrkdwn`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from ..runs.views import CardCall, CardDrawing, CardOutcome, CardRef, OutcomeStatus
from .card_notes import (
    approvers_words,
    as_json,
    decided_title,
    edited_note,
    lock_text,
    no_allow_blocks,
    outcome_text,
    outside_blocks,
    policy_blocks,
    preview_blocks,
    preview_digest_text,
    rerun_button,
    server_tool_text,
    why_blocks,
)
from .freezes import break_glass_button, frozen_blocks, review_blocks
from .ids import (
    ACTION_ALLOW,
    ACTION_APPROVE,
    ACTION_CANCEL,
    ACTION_EDIT,
    ACTION_REJECT,
    check_ledger_id,
    decision_block_id,
)
from .mrkdwn import (
    code_span,
    escape_cut,
    escape_mrkdwn,
    hidden_characters,
    mark_whitespace,
    one_line,
    preformatted,
    requester_text,
    slack_date,
    user_mention,
)
from .outbox import Renderer, Write
from .turns import RUNS_NEXT

__all__ = [
    "SECTION_TEXT_MAX",
    "Arguments",
    "approval_card",
    "approvers_text",
    "arguments_blocks",
    "card_body",
    "card_file",
    "card_renderer",
    "card_text",
    "decided_card",
    "decided_text",
    "extra_buttons",
    "lock_text",
    "minimal_blocks",
    "minimal_file_text",
    "overflow",
    "section",
    "slack_date",
]


approvers_text = approvers_words
"""Who may approve, in words (`bot.slack.card_notes.approvers_words`)."""

_HEADERS: Mapping[OutcomeStatus, str] = {
    "approved": "✅ Approved",
    "rejected": "❌ Rejected",
    "expired": "⌛ Expired",
    "cancelled": "🚫 Cancelled",
}


def approval_card(call: CardCall, *, arg_limit: int = 2500) -> list[dict[str, Any]]:
    """The pending card: what wants to run, who asked, and Approve / Reject buttons (no Approve
    when the card is `locked`: it says why)."""
    check_ledger_id(call.ledger_id)
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text="Approval needed"))]
    blocks += card_body(call, arg_limit)
    blocks += why_blocks(call)
    blocks += edited_note(call)
    blocks += policy_blocks(call)
    blocks += preview_blocks(call)
    approve = ButtonElement(
        text=PlainTextObject(text="Approve"),
        action_id=ACTION_APPROVE,
        value=call.ledger_id,
        style="primary",
    )
    if call.locked is not None:
        blocks.append(section(lock_text(call.locked)))
    blocks += frozen_blocks(call)  # a change freeze: no Approve, Edit or Allow (freezes.py)
    approvable = call.locked is None and call.frozen is None
    if approvable:
        too_long = call.allow_for is not None and len(call.allow_scope) > _ALLOW_SCOPE_MAX
        blocks += no_allow_blocks(call, scope_too_long=too_long)
    blocks.append(
        ActionsBlock(
            block_id=decision_block_id(
                call.digest, preview_digest=call.preview.digest if call.preview else None
            ),
            elements=[
                *([approve] if approvable else []),
                ButtonElement(
                    text=PlainTextObject(text="Reject"),
                    action_id=ACTION_REJECT,
                    value=call.ledger_id,
                    style="danger",
                ),
                # Edit and Allow approve too: a card that may not be approved offers neither.
                *(extra_buttons(call) if approvable else []),
                *(rerun_button(call) if call.locked is None else []),
                *break_glass_button(call),
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
    blocks += card_body(call, arg_limit, outcome)
    blocks += why_blocks(call, pending=False)
    blocks += edited_note(call)
    blocks += policy_blocks(call)
    blocks += preview_blocks(call)
    blocks.append(section(outcome_text(outcome)))
    blocks += review_blocks(call)  # a break-glass use: "Mark reviewed" until then
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
    if outcome.ran:
        return f"Ran (approved{who}): {code_span(call.tool)}"
    return f"{outcome.status.capitalize()}{who}: {code_span(call.tool)}"


# -- machinery ---------------------------------------------------------------------------------


def _to_dicts(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    if len(blocks) > 50:
        raise ValueError(f"a message holds at most 50 blocks, got {len(blocks)}")
    return [block.to_dict() for block in blocks]


# -- card_body -----------------------------------------------------------------------------------
# Block Kit machinery shared by the approval cards: the card body (title, arguments, context,
# held calls), argument layout within Slack's size limits, and dates in each reader's time zone.
#
# Untrusted text (arguments, descriptions) reaches mrkdwn only through `bot.slack.mrkdwn`.


SECTION_TEXT_MAX = 3000
_DESCRIPTION_MAX = 1000
_INLINE_VALUE_MAX = 200
_INLINE_ARGS_MAX = 10
_INLINE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,60}")
_HELD_SHOWN_MAX = 10
_HELD_ARGS_MAX = 150
_ARG_LIMIT_RANGE = (200, SECTION_TEXT_MAX - 100)


@dataclass(frozen=True)
class Arguments:
    """A call's arguments laid out as blocks."""

    blocks: tuple[Block, ...]
    full_text: str | None
    """The whole arguments as text when something was cut; the caller attaches it as a file."""


def card_body(call: CardCall, arg_limit: int, outcome: CardOutcome | None = None) -> list[Block]:
    """What a card shows whether pending or decided: the same facts before and after, led by
    what happened once decided (`outcome`)."""
    if outcome is None:
        title = f"{code_span(call.tool)} wants to run"
    else:
        title = decided_title(call, outcome)
    if call.server_tool is not None:
        title += "\n" + server_tool_text(call.server_tool)
    if call.description.strip():
        title += "\n" + escape_cut(call.description.strip(), _DESCRIPTION_MAX)
    blocks: list[Block] = [section(title)]
    blocks += outside_blocks(call)
    blocks += arguments_blocks(call.arguments, arg_limit).blocks
    if (warning := _warning(call.arguments)) is not None:
        blocks.append(section(warning))
    context = MarkdownTextObject(
        text=_context_text(call, decided=outcome is not None), verbatim=True
    )
    blocks.append(ContextBlock(elements=[context]))
    if call.held:
        blocks.append(section(_held_text(call.held)))
    return blocks


def _warning(arguments: Any) -> str | None:
    """What a careful reader must be told about the arguments before approving."""
    raw = _as_text(arguments)
    notes = []
    # The strings themselves, not their JSON: JSON writes a control character as `\u0007`.
    if hidden := hidden_characters("".join(_strings(arguments))):
        listed = ", ".join(hidden[:8]) + (", …" if len(hidden) > 8 else "")
        notes.append(f"invisible or direction-changing characters ({listed}), shown as `⟦U+…⟧`")
    if mark_whitespace(raw)[1]:
        notes.append("long runs of whitespace, shown as `⟦N spaces⟧` or `⟦N line breaks⟧`")
    if not notes:
        return None
    return ":warning: *Check before approving:* the arguments contain " + " and ".join(notes) + "."


def _shown(text: str) -> str:
    return mark_whitespace(text)[0]


def _context_text(call: CardCall, *, decided: bool = False) -> str:
    """Who asked, the digests, the approvals so far and who may give them (each rule's, in
    its own block, when several must approve), and the expiry while it waits."""
    parts = []
    if call.requested_by:
        parts.append(f"Requested by {requester_text(call.requested_by)}")
    parts.append(f"digest {code_span(call.digest, 64)}")
    if (preview := preview_digest_text(call)) is not None:
        parts.append(preview)
    if call.required_approvals > 1 and not call.requirements:
        progress = f"{len(call.approvals)} of {call.required_approvals} approvals"
        if call.approvals:
            shown = ", ".join(user_mention(user) for user in call.approvals[:10])
            progress += f" ({shown})"
        parts.append(progress)
    if not call.requirements:
        parts.append(f"Approvers: {approvers_text(call.approver_users, call.approver_groups)}")
    if call.escalated_to and not decided:
        users = tuple(a for a in call.escalated_to if not a.startswith("S"))
        groups = tuple(a for a in call.escalated_to if a.startswith("S"))
        parts.append(f"escalated to {approvers_text(users, groups)}")
    if call.expires_at is not None and not decided:
        parts.append(f"expires {slack_date(call.expires_at)}")
    return " · ".join(parts)


def _held_text(held: Sequence[tuple[str, Any]]) -> str:
    lines = ["*Runs once this batch is decided:*"]
    shown = 0
    for name, arguments in held[:_HELD_SHOWN_MAX]:
        line = f"• {code_span(name, 60)} {one_line(_as_text(arguments), _HELD_ARGS_MAX)}"
        if sum(len(text) + 1 for text in lines) + len(line) > SECTION_TEXT_MAX - 40:
            break
        lines.append(line)
        shown += 1
    if len(held) > shown:
        lines.append(f"• … and {len(held) - shown} more")
    return "\n".join(lines)


def arguments_blocks(arguments: Any, arg_limit: int) -> Arguments:
    low, high = _ARG_LIMIT_RANGE
    if not low <= arg_limit <= high:
        raise ValueError(f"arg_limit must be between {low} and {high}, got {arg_limit!r}")
    if arguments is None or (isinstance(arguments, Mapping) and not arguments):
        return Arguments((section("_No arguments_"),), None)
    if isinstance(arguments, str):
        block, cut = preformatted(_shown(arguments), arg_limit)
        return Arguments((section(f"*Arguments* (not JSON)\n{block}"),), _cut(cut, arguments))
    if not isinstance(arguments, Mapping):
        text = as_json(arguments)
        block, cut = preformatted(_shown(text), arg_limit)
        return Arguments((section(f"*Arguments*\n{block}"),), _cut(cut, text))

    blocks: list[Block] = []
    command = arguments.get("command")
    rest = dict(arguments)
    command_cut = False
    if isinstance(command, str):
        del rest["command"]
        block, command_cut = preformatted(_shown(command), arg_limit)
        blocks.append(section(f"*command*\n{block}"))
    rest_cut = False
    inline = _inline_text(rest)
    if rest and inline is not None and len(inline) <= arg_limit:
        blocks.append(section(inline))
    elif rest:
        label = "*Other arguments*" if isinstance(command, str) else "*Arguments*"
        block, rest_cut = preformatted(_shown(as_json(rest)), arg_limit)
        blocks.append(section(f"{label}\n{block}"))
    if rest_cut:
        full: str | None = as_json(arguments)
    elif command_cut:
        full = str(command)
    else:
        full = None
    return Arguments(tuple(blocks), full)


def _inline_text(arguments: Mapping[str, Any]) -> str | None:
    """`key`: value lines when every value is a short scalar, else None (shown as JSON)."""
    if len(arguments) > _INLINE_ARGS_MAX:
        return None
    lines = []
    for key, value in arguments.items():
        if not _INLINE_KEY.fullmatch(str(key)):
            return None
        if isinstance(value, str):
            shown = escape_mrkdwn(_shown(value)) if value else "_(empty)_"
        elif value is None or isinstance(value, bool | int | float):
            shown = json.dumps(value)
        else:
            return None
        if "\n" in shown or len(shown) > _INLINE_VALUE_MAX:
            return None
        lines.append(f"`{key}`: {shown}")
    return "\n".join(lines)


def _strings(value: Any) -> Iterator[str]:
    """Every string in `value` (keys too), however deep."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _cut(cut: bool, full: str) -> str | None:
    return full if cut else None


def section(text: str) -> SectionBlock:
    if len(text) > SECTION_TEXT_MAX:  # every caller budgets its text; this is a bug guard
        raise ValueError(f"section text is {len(text)} characters, over {SECTION_TEXT_MAX}")
    return SectionBlock(text=MarkdownTextObject(text=text, verbatim=True))


# -- minimal_card --------------------------------------------------------------------------------
# The card posted when Slack refused the full one (`invalid_blocks`): a line naming the tool and
# the digest, the arguments in an attached file, and the same buttons. Posting the same blocks
# again would be refused again; this one is small and plain enough to go through.
#
# What a human approves must be what runs (docs/architecture.md, "Binding"): the arguments are
# only in the file, so a card whose file could not be attached is `locked` (no Approve).


def card_file(tool: str, call_id: str) -> str:
    """The name of the file holding a card's full arguments."""
    return f"{tool}-{call_id}-arguments.txt"


def minimal_file_text(card: CardCall) -> str:
    """The call's full arguments (the attachment the minimal card points to)."""
    arguments = card.arguments
    return arguments if isinstance(arguments, str) else as_json(arguments)


def minimal_blocks(card: CardCall, filename: str) -> list[dict[str, Any]]:
    """A section saying where the arguments are, and the full card's buttons (and lock)."""
    text = (
        f"*Approval needed:* {code_span(card.tool)} wants to run (digest "
        f"{code_span(card.digest[:12])}). The full card could not be drawn; the arguments are "
        f"in the attached file {code_span(filename)}. Read it before deciding."
    )
    full = approval_card(card)
    kept = [b for b in full if b.get("type") == "actions"]
    if card.locked is not None:  # the lock's explanation is the section before the buttons
        kept = full[-2:]
    section_ = {"type": "section", "text": {"type": "mrkdwn", "text": text, "verbatim": True}}
    # The preview stays: Approve binds to it.
    return [section_, *_to_dicts(preview_blocks(card)), *kept]


_ALLOW_SCOPE_MAX = 180
"""Longest allowance scope the "Allow for" confirmation shows whole (its text holds 300)."""


def extra_buttons(call: CardCall) -> list[ButtonElement]:
    """ "Edit" and "Allow for <duration>", where the policy enables them (in that order)."""
    buttons = []
    if call.can_edit:
        buttons.append(
            ButtonElement(
                text=PlainTextObject(text="Edit"), action_id=ACTION_EDIT, value=call.ledger_id
            )
        )
    # "Allow for" is offered only where what confirms it can show the whole scope it would
    # allow. With shapes to choose from, the Allow dialog is the confirmation (its choices are
    # only the shapes it shows whole, `bot.slack.modals.allow_modal`); else the button's own.
    if call.allow_for is None or len(call.allow_scope) > _ALLOW_SCOPE_MAX:
        return buttons
    if call.allow_dialog:
        buttons.append(
            ButtonElement(
                text=PlainTextObject(text=f"Allow for {call.allow_for}"),
                action_id=ACTION_ALLOW,
                value=call.ledger_id,
            )
        )
    else:
        scope = call.allow_scope
        buttons.append(
            ButtonElement(
                text=PlainTextObject(text=f"Allow for {call.allow_for}"),
                action_id=ACTION_ALLOW,
                value=call.ledger_id,
                confirm=ConfirmObject(
                    title=f"Allow for {call.allow_for}?",
                    text=PlainTextObject(
                        text=f"This call runs now, and in this channel calls of {scope} run "
                        f"without a card for {call.allow_for}. Each run is posted and audited."
                    ),
                    confirm="Allow",
                    deny="Back",
                ),
            )
        )
    return buttons


# -- a card's redraw ---------------------------------------------------------------------------
# A card's redraw as a `chat.update`, and the renderer of the outbox's `CARD_REDRAW` rows.
#
# The store writes a card's redraw as an intent (`bot.store.card_redraw`) in the transaction of
# the change the card shows; the sender (`bot.slack.outbox`) draws it with `card_renderer` when
# it sends it, from the call's state then (the run service's `Cards.drawing`), with the same
# builders as the card posted. So a decision and its redraw commit together, and however late
# the row is sent, it shows the latest state.


Draw = Callable[[str], Awaitable[CardDrawing | None]]
"""The card of a call as its state says it should look now (`Cards.drawing`)."""
Drawn = Callable[[str, str], Awaitable[None]]
"""Record what a card now shows (`Store.card_drawn`)."""


def _card_update(
    ref: CardRef, card: CardCall, outcome: CardOutcome | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `chat.update` arguments that redraw the card, and the ones to use instead when
    Slack refuses its blocks (a card posted minimal is redrawn minimal)."""
    if outcome is None:
        blocks, text = approval_card(card), card_text(card)
        fallback = minimal_blocks(card, card_file(card.tool, card.call_id))
    else:
        blocks, text = decided_card(card, outcome), decided_text(card, outcome)
        fallback = []
    params = {"channel": ref.channel_id, "ts": ref.ts, "text": text}
    return {**params, "blocks": blocks}, {**params, "blocks": fallback}


def card_renderer(draw: Draw, drawn: Drawn) -> Renderer:
    """The outbox's renderer for `CARD_REDRAW` rows (params `{"ledger_id": ...}`)."""

    async def render(params: Mapping[str, Any], _retried: bool) -> Write | None:
        # A redraw repeated is the same edit: nothing to look for first.
        ledger_id = str(params.get("ledger_id") or "")
        drawing = await draw(ledger_id)
        if drawing is None:
            return None
        update, fallback = _card_update(drawing.ref, drawing.card, drawing.outcome)
        state = drawing.state

        async def sent(_answer: Mapping[str, Any]) -> None:
            await drawn(ledger_id, state)

        outcome = drawing.outcome
        runs = outcome is not None and outcome.status == "approved" and not outcome.ran
        meta = {"fallback": fallback, RUNS_NEXT: runs}
        return Write("chat.update", update, meta, sent)

    return render
