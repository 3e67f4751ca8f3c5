"""The parts of an approval card that say why the call is there and what it still needs: the
model's stated reason and what it asked for before an edit, the policy rule that gated the
call, each rule that must approve, the parts of a command the policy judged, why Approve or
"Allow for" is absent, the line a decided card leads with, the line naming an MCP server's
tool, the preview (what the deciding rule's read-only command printed, with "Re-run preview"),
and what an outside request's card adds (`bot.plane`: who asked, why, and that
OpsGate will not run the command itself; the caller does, once approved).

The model's words and a command's text are untrusted: they reach mrkdwn only through
`bot.slack.mrkdwn`, on one line each, so they cannot draw a line of the card of their own.
"""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    Block,
    ButtonElement,
    ContextBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from ..runs.views import (
    PREVIEW_LINES,
    CardCall,
    CardOutcome,
    CardPart,
    CardPreview,
    CardRequirement,
    ServerTool,
)
from ..store import CardLock
from ..words import count
from .ids import ACTION_RERUN_PREVIEW
from .mrkdwn import (
    code_span,
    escape_cut,
    escape_mrkdwn,
    neutralise_links,
    one_line,
    preformatted,
    requester_text,
    slack_date,
    user_mention,
)

__all__ = [
    "PREVIEW_LINES",
    "REASON_SHOWN_MAX",
    "approvers_words",
    "as_json",
    "decided_title",
    "edited_note",
    "lock_text",
    "no_allow_blocks",
    "outcome_text",
    "outside_blocks",
    "parts_blocks",
    "policy_blocks",
    "preview_blocks",
    "preview_digest_text",
    "reason_blocks",
    "requirements_blocks",
    "rerun_button",
    "server_tool_text",
    "why_blocks",
]

REASON_SHOWN_MAX = 600
"""Characters of the model's stated reason a card shows (escaped); the rest is cut."""
_OUTCOME_REASON_MAX = 1500
_PARTS_SHOWN_MAX = 8
_PART_TEXT_MAX = 120
_PART_WHY_MAX = 200
_RULE_MAX = 160
_TEXT_MAX = 2900
"""A section's budget, under Slack's 3,000 characters."""


def _section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text, verbatim=True))


def reason_blocks(call: CardCall) -> list[Block]:
    """The model's stated reason for the call, marked as its words (none: no block)."""
    if call.model_reason is None or not call.model_reason.strip():
        return []
    said = one_line(neutralise_links(call.model_reason), REASON_SHOWN_MAX)
    return [_section(f":speech_balloon: _The model says:_ “{said}”")]


def approvers_words(users: tuple[str, ...], groups: tuple[str, ...]) -> str:
    """Who may approve, e.g. "<@U1>, <@U2> or members of <!subteam^S1>"; nobody listed means
    anyone in the channel. Ids come from the policy file, not from a message."""
    if not users and not groups:
        return "anyone in the channel"
    names = [f"<@{u}>" if u.startswith(("U", "W")) else escape_mrkdwn(u) for u in users]
    if groups:
        names.append("members of " + ", ".join(f"<!subteam^{g}>" for g in groups))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _requirement_line(need: CardRequirement, pending: bool) -> str:
    mark = ":white_check_mark:" if need.met else ":hourglass_flowing_sand:"
    line = f"{mark} {code_span(need.rule, _RULE_MAX)}: {len(need.approved_by)} of {need.needed}"
    if need.approved_by:
        line += " (" + ", ".join(user_mention(u) for u in need.approved_by[:10]) + ")"
    if pending and not need.met:
        missing = need.needed - len(need.approved_by)
        who = approvers_words(need.approver_users, need.approver_groups)
        line += f" · {missing} more from {who}"
    return line


def requirements_blocks(call: CardCall, *, pending: bool = True) -> list[Block]:
    """Each rule that must approve a call whose parts match several, with who approved toward
    it and, while it waits, what is still needed and from whom."""
    if not call.requirements:
        return []
    lines = ["*Every one of these must approve:*"]
    for need in call.requirements:
        line = _requirement_line(need, pending)
        if sum(len(text) + 1 for text in lines) + len(line) > _TEXT_MAX:
            lines.append("• …")
            break
        lines.append(line)
    return [_section("\n".join(lines))]


def _part_line(number: int, part: CardPart) -> str:
    rule = f"{code_span(part.rule, 60)}: " if part.rule else ""
    return (
        f"{number}. {code_span(part.text, _PART_TEXT_MAX)} → _{part.tier}_ · "
        f"{rule}{escape_cut(part.why, _PART_WHY_MAX)}"
    )


def parts_blocks(call: CardCall) -> list[Block]:
    """Which parts of the command the policy judged, and why (`policy explain`'s words);
    nothing for a call of one part that its rule names already."""
    if len(call.parts) < 2 and not any(p.rule is None for p in call.parts):
        return []
    lines = ["*What the policy judged:*"]
    for number, part in enumerate(call.parts[:_PARTS_SHOWN_MAX], start=1):
        line = _part_line(number, part)
        if sum(len(text) + 1 for text in lines) + len(line) > _TEXT_MAX:
            break
        lines.append(line)
    if len(call.parts) > len(lines) - 1:
        lines.append(f"… and {len(call.parts) - (len(lines) - 1)} more")
    return [_section("\n".join(lines))]


def no_allow_blocks(call: CardCall, *, scope_too_long: bool = False) -> list[Block]:
    """Why the pending card has no "Allow for" (when the policy would otherwise speak of one)."""
    why = call.no_allow
    if why is None and scope_too_long:
        why = "what it would allow is too long to confirm on the card"
    if why is None:
        return []
    text = f":information_source: No “Allow for”: {escape_cut(why, 400)}"
    return [ContextBlock(elements=[MarkdownTextObject(text=text, verbatim=True)])]


def decided_title(call: CardCall, outcome: CardOutcome) -> str:
    """What happened to the call, where a pending card says it "wants to run"."""
    tool = code_span(call.tool)
    who = f" by {user_mention(outcome.decided_by)}" if outcome.decided_by else ""
    match outcome.status:
        case "approved":
            if not outcome.ran:
                return f"{tool} was approved{who} to run"
            how = "failed" if outcome.failed else "ended"
            ended = f", {how}: {one_line(outcome.ended, 200)}" if outcome.ended else ""
            return f"{tool} ran (approved{who}){ended}"
        case "rejected":
            return f"{tool} was rejected{who or ' by the policy'}: it did not run"
        case "expired":
            return f"{tool} expired: nobody decided in time, it did not run"
        case "cancelled":
            return f"{tool} was cancelled{who}: it did not run"


def why_blocks(call: CardCall, *, pending: bool = True) -> list[Block]:
    """Why the call is here: the model's words, each rule that must approve, the parts the
    policy judged."""
    return [*reason_blocks(call), *requirements_blocks(call, pending=pending), *parts_blocks(call)]


def outcome_text(outcome: CardOutcome) -> str:
    """The decided card's last line: who decided, when, and their reason."""
    verb = outcome.status.capitalize()
    who = f" by {user_mention(outcome.decided_by)}" if outcome.decided_by else ""
    text = f"*{verb}*{who} · {slack_date(outcome.decided_at)}"
    if outcome.status == "expired":
        text += ": no decision in time, the call was not run"
    if outcome.reason and outcome.reason.strip():
        text += f"\n*Reason:* {escape_cut(outcome.reason.strip(), _OUTCOME_REASON_MAX)}"
    return text


def edited_note(call: CardCall) -> list[Block]:
    """Who changed the arguments, and what the model had asked for."""
    if call.edited_by is None:
        return []
    original = escape_cut(as_json(call.original_arguments), 1500)
    return [
        _section(
            f":pencil2: Arguments edited by {user_mention(call.edited_by)}; the model asked "
            f"for:\n```{original}```"
        )
    ]


def as_json(value: Any) -> str:
    """The arguments as a person reads them: indented JSON."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def policy_blocks(call: CardCall) -> list[Block]:
    """The policy rule that gated the call, and why (the operator's words, escaped)."""
    if call.policy_rule is None:
        return []
    why = f": {escape_cut(call.justification, 300)}" if call.justification else ""
    return [_section(f":scroll: Policy {code_span(call.policy_rule, 160)}{why}")]


def lock_text(why: CardLock) -> str:
    """Why a card has no Approve button."""
    match why:
        case "arguments_not_attached":
            return (
                ":no_entry: This call cannot be approved here: its arguments are too long to "
                "show on the card and the file holding all of them could not be attached, so "
                "nobody could see everything that would run. Reject it, or cancel the run."
            )
        case "forbidden":
            return (
                ":no_entry: The policy forbids this call: it never runs and cannot be approved. "
                "The model has been told why."
            )


# -- server_tool ---------------------------------------------------------------------------------
# The line of an approval card that names an MCP server's tool and its annotations.
#
# The server's title for the tool is untrusted (a server says what it likes), so it is escaped;
# the labels are ours. A tool annotated destructive is flagged where nobody can miss it.


_TITLE_MAX = 200


def server_tool_text(tool: ServerTool) -> str:
    """e.g. ":warning: *destructive* · MCP server `k8s`, tool `delete_pod` (Delete a pod)"."""
    named = f"MCP server {code_span(tool.server, 60)}, tool {code_span(tool.tool, 80)}"
    if tool.title and tool.title != tool.tool:
        named += f" ({one_line(tool.title, _TITLE_MAX)})"
    labels = [label for label in tool.labels if not (tool.destructive and label == "destructive")]
    hints = f" · _{escape_cut(', '.join(labels), 200)}_" if labels else ""
    warning = ":warning: *destructive* · " if tool.destructive else ""
    return f"{warning}{named}{hints}"


_OUTSIDE_REASON_MAX = 1500


def outside_blocks(call: CardCall) -> list[Block]:
    """Who asked from outside, why, and who runs the command (the caller, not OpsGate)."""
    if call.outside is None:
        return []
    client = escape_cut(call.outside.client, 80)
    who = f" for {requester_text(call.requested_by)}" if call.requested_by else ""
    text = f":inbox_tray: Asked by *{client}* (outside automation){who}."
    if call.outside.reason:
        text += f"\n*Reason:* {escape_cut(call.outside.reason, _OUTSIDE_REASON_MAX)}"
    text += f"\nOpsGate will not run this itself: {client} runs it once approved."
    return [SectionBlock(text=MarkdownTextObject(text=text, verbatim=True))]


# -- the preview -------------------------------------------------------------------------------
# The preview on an approval card: what the deciding rule's read-only command printed, its exit
# status, when it ran, the files it read with their digests, and the "Re-run preview" button.
#
# The output is untrusted (a command's) and reaches mrkdwn only through `bot.slack.mrkdwn`. The
# card shows its first lines; the rest is cut with a note naming the file the run service attached
# to the thread with the whole output (the digest covers the whole output). A failed preview says
# "preview failed" and keeps Approve: the person deciding sees the warning and the output.


_OUTPUT_BUDGET = 2400
_SECTION_MAX = 3000
_INPUTS_SHOWN = 10


def preview_blocks(call: CardCall) -> list[Block]:
    """The preview's blocks (none when the call has no preview)."""
    preview = call.preview
    if preview is None:
        return []
    blocks: list[Block] = [_preview_section(_heading(preview))]
    if preview.inputs:
        blocks.append(_preview_section(_inputs(preview)))
    shown, hidden = _first_lines(preview.output)
    if shown:
        blocks.append(_preview_section(shown))
    if hidden:
        where = (
            f"the whole output is attached to the thread as {code_span(preview.file, 80)}; "
            if preview.file
            else ""
        )
        blocks.append(
            _preview_section(
                f"_… {count(hidden, 'more line')} of the preview cut; {where}its digest "
                f"{code_span(preview.digest[:12], 12)} covers the whole output._"
            )
        )
    return blocks


def preview_digest_text(call: CardCall) -> str | None:
    """The preview's digest for the card's context line, beside the call's digest."""
    return None if call.preview is None else f"preview digest {code_span(call.preview.digest[:12])}"


def rerun_button(call: CardCall) -> list[ButtonElement]:
    """ "Re-run preview", on a pending card whose call has a preview."""
    if call.preview is None:
        return []
    return [
        ButtonElement(
            text=PlainTextObject(text="Re-run preview"),
            action_id=ACTION_RERUN_PREVIEW,
            value=call.ledger_id,
        )
    ]


def _heading(preview: CardPreview) -> str:
    ran = preview.ran_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    command = code_span(preview.command, 300)
    if preview.failed is not None:
        return (
            f":warning: *preview failed* ({escape_cut(preview.failed, 300)}): {command} · "
            f"ran {ran}\nApprove is still offered: read the output before approving."
        )
    return f":mag: *Preview* {command} · exit {preview.exit_status} · ran {ran}"


_STATES = {
    "directory": "directory, its files' digest",
    "absent": "no such file: the run refuses if one appears",
    "unreadable": "cannot be read: the run will refuse",
}


def _inputs(preview: CardPreview) -> str:
    """One line per file the preview read: the run checks each digest first."""
    lines = ["Files read, bound to Approve (the run refuses if one changes):"]
    for path, state, digest in preview.inputs[:_INPUTS_SHOWN]:
        what = f"sha256 {code_span(digest[:16], 16)}" if digest else ""
        note = _STATES.get(state)
        shown = ", ".join(part for part in (what, note) if part)
        lines.append(f"• {code_span(path, 200)} {shown}")
    if len(preview.inputs) > _INPUTS_SHOWN:
        lines.append(f"• … and {count(len(preview.inputs) - _INPUTS_SHOWN, 'more file')}")
    return "\n".join(lines)


def _first_lines(output: str) -> tuple[str, int]:
    """The first lines of `output` as a code block within the card's budget, and how many
    lines were left out."""
    lines = output.rstrip("\n").split("\n") if output.strip() else []
    if not lines:
        return "", 0
    kept = 0
    block = ""
    for end in range(1, min(len(lines), PREVIEW_LINES) + 1):
        candidate, cut = preformatted("\n".join(lines[:end]), _SECTION_MAX - 100)
        if cut or len(candidate) > _OUTPUT_BUDGET:
            break
        kept, block = end, candidate
    if kept == 0:  # one very long first line: cut it
        block, _ = preformatted(lines[0][:400], _SECTION_MAX - 100)
        kept = 1
    return block, len(lines) - kept


def _preview_section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text[:_SECTION_MAX], verbatim=True))
