"""Block Kit for approval cards and the reject modal, and the texts of `/opsgate`: pure functions
from data to Slack dicts and mrkdwn.

Everything shown comes from the ledger row the bot stored at pause time; the buttons carry only
the ledger id (DESIGN.md, "Binding"). Arguments and descriptions are untrusted and reach mrkdwn
only through `bot._text`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from ._text import (
    code_span,
    escape_cut,
    escape_mrkdwn,
    one_line,
    preformatted,
    requester_text,
    user_mention,
)

__all__ = [
    "ACTION_APPROVE",
    "ACTION_CANCEL",
    "ACTION_REASON",
    "ACTION_REJECT",
    "BLOCK_ACTIONS",
    "BLOCK_REASON",
    "CALLBACK_REJECT",
    "CardCall",
    "CardOutcome",
    "ChannelHelp",
    "OutcomeStatus",
    "PendingEntry",
    "approval_card",
    "card_text",
    "decided_card",
    "decided_text",
    "help_text",
    "overflow",
    "pending_text",
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

OutcomeStatus = Literal["approved", "rejected", "expired", "cancelled"]

SECTION_TEXT_MAX = 3000
BUTTON_VALUE_MAX = 2000
REASON_MAX = 1000
"""Longest reason the modal accepts (raw characters)."""
_REASON_SHOWN_MAX = 1500
_DESCRIPTION_MAX = 1000
_INLINE_VALUE_MAX = 200
_INLINE_ARGS_MAX = 10
_INLINE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,60}")
_HELD_SHOWN_MAX = 10
_HELD_ARGS_MAX = 150
_ARG_LIMIT_RANGE = (200, SECTION_TEXT_MAX - 100)

_HEADERS: Mapping[OutcomeStatus, str] = {
    "approved": "✅ Approved",
    "rejected": "❌ Rejected",
    "expired": "⌛ Expired",
    "cancelled": "🚫 Cancelled",
}


@dataclass(frozen=True)
class CardCall:
    """Everything a card shows; the bot builds it from a ledger row."""

    ledger_id: str
    """Opaque id, the only thing a button value carries."""
    tool: str
    description: str
    arguments: Any
    """The stored arguments: a dict, or the raw string when the model's JSON did not parse."""
    digest: str
    requested_by: str | None
    """Slack user id of the requester, or None."""
    held: tuple[tuple[str, Any], ...] = ()
    """Sibling calls (tool name, arguments) that run once the batch is decided."""
    required_approvals: int = 1
    approvals: tuple[str, ...] = ()
    """User ids that approved so far."""


@dataclass(frozen=True)
class CardOutcome:
    status: OutcomeStatus
    decided_by: str | None
    decided_at: datetime
    reason: str | None = None


@dataclass(frozen=True)
class _Arguments:
    blocks: tuple[Block, ...]
    full_text: str | None
    """The whole arguments as text when something was cut; the caller attaches it as a file."""


def approval_card(call: CardCall, *, arg_limit: int = 2500) -> list[dict[str, Any]]:
    """The pending card: what wants to run, who asked, and Approve / Reject buttons."""
    _check_ledger_id(call.ledger_id)
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text="Approval needed"))]
    blocks += _body(call, arg_limit)
    blocks.append(
        ActionsBlock(
            block_id=BLOCK_ACTIONS,
            elements=[
                ButtonElement(
                    text=PlainTextObject(text="Approve"),
                    action_id=ACTION_APPROVE,
                    value=call.ledger_id,
                    style="primary",
                ),
                ButtonElement(
                    text=PlainTextObject(text="Reject"),
                    action_id=ACTION_REJECT,
                    value=call.ledger_id,
                    style="danger",
                ),
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
    blocks += _body(call, arg_limit)
    blocks.append(_section(_outcome_text(outcome)))
    return _to_dicts(blocks)


def overflow(call: CardCall, arg_limit: int = 2500) -> str | None:
    """The full arguments as text when the card had to cut them, else None."""
    return _arguments(call.arguments, arg_limit).full_text


def card_text(call: CardCall) -> str:
    """Notification / fallback text of the pending card."""
    return f"Approval needed: {code_span(call.tool)} wants to run"


def decided_text(call: CardCall, outcome: CardOutcome) -> str:
    """Notification / fallback text of the decided card."""
    who = f" by {user_mention(outcome.decided_by)}" if outcome.decided_by else ""
    return f"{outcome.status.capitalize()}{who}: {code_span(call.tool)}"


@dataclass(frozen=True)
class PendingEntry:
    """One approval waiting for the person who ran `/opsgate pending`."""

    tool: str
    channel: str
    requested_by: str | None
    permalink: str | None
    expires_at: datetime | None = None
    approvals: int = 0
    required_approvals: int = 1


_PENDING_SHOWN_MAX = 20


def pending_text(entries: Sequence[PendingEntry]) -> str:
    """The ephemeral answer to `/opsgate pending`: each approval with a link to its card."""
    if not entries:
        return "Nothing is waiting for your approval right now."
    lines = [f"*Waiting for your decision ({len(entries)}):*"]
    for entry in entries[:_PENDING_SHOWN_MAX]:
        card = f"<{entry.permalink}|open the card>" if entry.permalink else "card not found"
        line = f"• {code_span(entry.tool, 60)} in <#{entry.channel}> · {card}"
        if entry.requested_by:
            line += f" · asked by {requester_text(entry.requested_by)}"
        if entry.required_approvals > 1:
            line += f" · {entry.approvals} of {entry.required_approvals} approvals"
        if entry.expires_at is not None:
            line += f" · expires {_slack_date(entry.expires_at)}"
        lines.append(line)
    if len(entries) > _PENDING_SHOWN_MAX:
        lines.append(f"• … and {len(entries) - _PENDING_SHOWN_MAX} more")
    return "\n".join(lines)


@dataclass(frozen=True)
class ChannelHelp:
    """What `/opsgate help` says about the channel it was run in."""

    channel: str
    acts_here: bool
    trigger: str
    allowed_bots: tuple[str, ...]
    approvers: str
    """Slack mrkdwn naming who may approve (from `ApproverSpec.mention_text`)."""
    required_approvals: int
    allow_self_approval: bool
    ttl: str
    tools: tuple[tuple[str, str], ...]
    """(tool name, when it asks for approval) for each tool offered in the channel."""
    concurrency: int
    has_instructions: bool
    policy_source: str


def help_text(info: ChannelHelp) -> str:
    """`/opsgate help`: usage and the channel's policy, in one screen of mrkdwn."""
    usage = [
        "*OpsGate* works on ops requests with tools; anything risky waits for a human's approval.",
        "• `/opsgate <request>`: start a run here (your request becomes a new thread)",
        "• `/opsgate pending`: approvals waiting for your decision, with links to their cards",
        "• `/opsgate help`: this help",
        "• Mention me in a channel, or write to me in a DM; reply in the thread to go on",
        "• Write `cancel` in a thread waiting for approval (or click *Cancel run* on a card) "
        "to end the run without running anything: the requester or an approver may",
    ]
    here = f"<#{info.channel}>"
    if not info.acts_here:
        return "\n".join(
            [*usage, "", f"*In {here}*: I don't act here; `defaults.channels` does not list it."]
        )
    if info.trigger == "every_message":
        trigger = "every new message starts a run in its thread"
    else:
        trigger = "a mention of me starts a run"
    if info.allowed_bots:
        trigger += "; messages from " + ", ".join(code_span(b, 30) for b in info.allowed_bots)
        trigger += " may too"
    self_approval = "may" if info.allow_self_approval else "may not"
    if info.tools:
        tools = ", ".join(
            f"{code_span(name, 40)} ({escape_mrkdwn(how)})" for name, how in info.tools
        )
    else:
        tools = "none"
    policy = [
        "",
        f"*In {here}:*",
        f"• Trigger: {trigger}",
        f"• Approvers: {info.approvers}; {info.required_approvals} approval(s) needed; "
        f"the requester {self_approval} approve their own request",
        f"• Decisions expire after {escape_mrkdwn(info.ttl)}",
        f"• Tools: {tools}",
        f"• Up to {info.concurrency} run(s) at once; more are queued",
    ]
    if info.has_instructions:
        policy.append("• This channel has its own instructions for me")
    policy.append(f"_Policy: {escape_mrkdwn(info.policy_source)}_")
    return "\n".join([*usage, *policy])


def reject_modal(ledger_id: str) -> dict[str, Any]:
    """The modal a Reject click opens; `private_metadata` carries the ledger id back."""
    _check_ledger_id(ledger_id)
    view = View(
        type="modal",
        callback_id=CALLBACK_REJECT,
        private_metadata=ledger_id,
        title=PlainTextObject(text="Reject tool call"),
        submit=PlainTextObject(text="Reject"),
        close=PlainTextObject(text="Cancel"),
        blocks=[
            _section("The call will not run. The agent is told it was rejected, and why."),
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
    """The reason typed into `reject_modal`, from a submitted view; None when left empty."""
    state = view.get("state")
    values = state.get("values") if isinstance(state, Mapping) else None
    block = values.get(BLOCK_REASON) if isinstance(values, Mapping) else None
    field = block.get(ACTION_REASON) if isinstance(block, Mapping) else None
    value = field.get("value") if isinstance(field, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()[:REASON_MAX]


# -- machinery ---------------------------------------------------------------------------------


def _body(call: CardCall, arg_limit: int) -> list[Block]:
    title = f"{code_span(call.tool)} wants to run"
    if call.description.strip():
        title += "\n" + escape_cut(call.description.strip(), _DESCRIPTION_MAX)
    blocks: list[Block] = [_section(title)]
    blocks += _arguments(call.arguments, arg_limit).blocks
    context = MarkdownTextObject(text=_context_text(call), verbatim=True)
    blocks.append(ContextBlock(elements=[context]))
    if call.held:
        blocks.append(_section(_held_text(call.held)))
    return blocks


def _context_text(call: CardCall) -> str:
    parts = []
    if call.requested_by:
        parts.append(f"Requested by {requester_text(call.requested_by)}")
    parts.append(f"digest {code_span(call.digest, 64)}")
    if call.required_approvals > 1:
        progress = f"{len(call.approvals)} of {call.required_approvals} approvals"
        if call.approvals:
            shown = ", ".join(user_mention(user) for user in call.approvals[:10])
            progress += f" ({shown})"
        parts.append(progress)
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


def _outcome_text(outcome: CardOutcome) -> str:
    verb = outcome.status.capitalize()
    who = f" by {user_mention(outcome.decided_by)}" if outcome.decided_by else ""
    text = f"*{verb}*{who} · {_slack_date(outcome.decided_at)}"
    if outcome.status == "expired":
        text += ": no decision in time, the call was not run"
    if outcome.reason and outcome.reason.strip():
        text += f"\n*Reason:* {escape_cut(outcome.reason.strip(), _REASON_SHOWN_MAX)}"
    return text


def _slack_date(moment: datetime) -> str:
    """Shown in each reader's time zone; the fallback (UTC) where Slack cannot format it."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def _arguments(arguments: Any, arg_limit: int) -> _Arguments:
    low, high = _ARG_LIMIT_RANGE
    if not low <= arg_limit <= high:
        raise ValueError(f"arg_limit must be between {low} and {high}, got {arg_limit!r}")
    if arguments is None or (isinstance(arguments, Mapping) and not arguments):
        return _Arguments((_section("_No arguments_"),), None)
    if isinstance(arguments, str):
        block, cut = preformatted(arguments, arg_limit)
        return _Arguments((_section(f"*Arguments* (not JSON)\n{block}"),), _cut(cut, arguments))
    if not isinstance(arguments, Mapping):
        text = _as_json(arguments)
        block, cut = preformatted(text, arg_limit)
        return _Arguments((_section(f"*Arguments*\n{block}"),), _cut(cut, text))

    blocks: list[Block] = []
    command = arguments.get("command")
    rest = dict(arguments)
    command_cut = False
    if isinstance(command, str):
        del rest["command"]
        block, command_cut = preformatted(command, arg_limit)
        blocks.append(_section(f"*command*\n{block}"))
    rest_cut = False
    inline = _inline_text(rest)
    if rest and inline is not None and len(inline) <= arg_limit:
        blocks.append(_section(inline))
    elif rest:
        label = "*Other arguments*" if isinstance(command, str) else "*Arguments*"
        block, rest_cut = preformatted(_as_json(rest), arg_limit)
        blocks.append(_section(f"{label}\n{block}"))
    if rest_cut:
        full: str | None = _as_json(arguments)
    elif command_cut:
        full = str(command)
    else:
        full = None
    return _Arguments(tuple(blocks), full)


def _inline_text(arguments: Mapping[str, Any]) -> str | None:
    """`key`: value lines when every value is a short scalar, else None (shown as JSON)."""
    if len(arguments) > _INLINE_ARGS_MAX:
        return None
    lines = []
    for key, value in arguments.items():
        if not _INLINE_KEY.fullmatch(str(key)):
            return None
        if isinstance(value, str):
            shown = escape_mrkdwn(value) if value else "_(empty)_"
        elif value is None or isinstance(value, bool | int | float):
            shown = json.dumps(value)
        else:
            return None
        if "\n" in shown or len(shown) > _INLINE_VALUE_MAX:
            return None
        lines.append(f"`{key}`: {shown}")
    return "\n".join(lines)


def _as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _cut(cut: bool, full: str) -> str | None:
    return full if cut else None


def _section(text: str) -> SectionBlock:
    if len(text) > SECTION_TEXT_MAX:  # every caller budgets its text; this is a bug guard
        raise ValueError(f"section text is {len(text)} characters, over {SECTION_TEXT_MAX}")
    return SectionBlock(text=MarkdownTextObject(text=text, verbatim=True))


def _check_ledger_id(ledger_id: str) -> None:
    if not ledger_id or len(ledger_id) > BUTTON_VALUE_MAX:
        raise ValueError(f"ledger id must be 1..{BUTTON_VALUE_MAX} characters, got {ledger_id!r}")


def _to_dicts(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    if len(blocks) > 50:
        raise ValueError(f"a message holds at most 50 blocks, got {len(blocks)}")
    return [block.to_dict() for block in blocks]
