"""The parts of an approval card that say why the call is there and what it still needs: the
model's stated reason, each rule that must approve, the parts of a command the policy judged,
why "Allow for" is absent, the line a decided card leads with, the line naming an MCP
server's tool, and what an outside request's card adds (`bot.plane`: who asked, why, and that
OpsGate will not run the command itself; the caller does, once approved).

The model's words and a command's text are untrusted: they reach mrkdwn only through
`bot.slack.mrkdwn`, on one line each, so they cannot draw a line of the card of their own.
"""

from __future__ import annotations

from slack_sdk.models.blocks import Block, ContextBlock, MarkdownTextObject, SectionBlock

from ..runs.views import CardCall, CardOutcome, CardPart, CardRequirement, ServerTool
from .mrkdwn import (
    code_span,
    escape_cut,
    escape_mrkdwn,
    neutralise_links,
    one_line,
    requester_text,
    slack_date,
    user_mention,
)

__all__ = [
    "REASON_SHOWN_MAX",
    "approvers_words",
    "decided_title",
    "no_allow_blocks",
    "outcome_text",
    "outside_blocks",
    "parts_blocks",
    "reason_blocks",
    "requirements_blocks",
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
