"""Block Kit machinery shared by the approval cards: the card body (title, arguments, context,
held calls), argument layout within Slack's size limits, and dates in each reader's time zone.

Untrusted text (arguments, descriptions) reaches mrkdwn only through `bot.slack._text`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slack_sdk.models.blocks import Block, ContextBlock, MarkdownTextObject, SectionBlock

from ..runs.views import CardCall
from ._server_tool import server_tool_text
from ._text import (
    code_span,
    escape_cut,
    escape_mrkdwn,
    hidden_characters,
    mark_whitespace,
    one_line,
    preformatted,
    requester_text,
    user_mention,
)

__all__ = [
    "SECTION_TEXT_MAX",
    "Arguments",
    "approvers_text",
    "arguments_blocks",
    "as_json",
    "card_body",
    "section",
    "slack_date",
]

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


def card_body(call: CardCall, arg_limit: int) -> list[Block]:
    """What a card shows whether pending or decided: the same facts before and after."""
    title = f"{code_span(call.tool)} wants to run"
    if call.server_tool is not None:
        title += "\n" + server_tool_text(call.server_tool)
    if call.description.strip():
        title += "\n" + escape_cut(call.description.strip(), _DESCRIPTION_MAX)
    blocks: list[Block] = [section(title)]
    blocks += arguments_blocks(call.arguments, arg_limit).blocks
    if (warning := _warning(call.arguments)) is not None:
        blocks.append(section(warning))
    context = MarkdownTextObject(text=_context_text(call), verbatim=True)
    blocks.append(ContextBlock(elements=[context]))
    if call.held:
        blocks.append(section(_held_text(call.held)))
    return blocks


def _warning(arguments: Any) -> str | None:
    """What a careful reader must be told about the arguments before approving."""
    raw = _as_text(arguments)
    notes = []
    if hidden := hidden_characters(raw):
        listed = ", ".join(hidden[:8]) + (", …" if len(hidden) > 8 else "")
        notes.append(f"invisible or direction-changing characters ({listed}), shown as `⟦U+…⟧`")
    if mark_whitespace(raw)[1]:
        notes.append("long runs of whitespace, shown as `⟦N spaces⟧` or `⟦N line breaks⟧`")
    if not notes:
        return None
    return ":warning: *Check before approving:* the arguments contain " + " and ".join(notes) + "."


def _shown(text: str) -> str:
    return mark_whitespace(text)[0]


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
    parts.append(f"Approvers: {approvers_text(call.approver_users, call.approver_groups)}")
    if call.expires_at is not None:
        parts.append(f"expires {slack_date(call.expires_at)}")
    return " · ".join(parts)


def approvers_text(users: Sequence[str], groups: Sequence[str]) -> str:
    """Who may approve, e.g. "<@U1>, <@U2> or members of <!subteam^S1>"; nobody listed means
    anyone in the channel. Ids come from the policy file, not from a message."""
    if not users and not groups:
        return "anyone in the channel"
    names = [f"<@{u}>" for u in users]
    if groups:
        names.append("members of " + ", ".join(f"<!subteam^{g}>" for g in groups))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


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


def slack_date(moment: datetime) -> str:
    """Shown in each reader's time zone; the fallback (UTC) where Slack cannot format it."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


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


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _cut(cut: bool, full: str) -> str | None:
    return full if cut else None


def section(text: str) -> SectionBlock:
    if len(text) > SECTION_TEXT_MAX:  # every caller budgets its text; this is a bug guard
        raise ValueError(f"section text is {len(text)} characters, over {SECTION_TEXT_MAX}")
    return SectionBlock(text=MarkdownTextObject(text=text, verbatim=True))
