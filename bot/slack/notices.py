"""The run service's notices in Slack's words: one mrkdwn text per `Notice`, and the file to
attach when a tool's output is too long to show; among them the direct messages of the approval
ladder (`bot.runs.ladder`: a reminder, an escalation step, on-call), whose waiting time and
delegations the Home tab shows in the same words.

Raw text inside a notice (model output, tool output, error messages, tool names) reaches mrkdwn
only through `bot.slack.mrkdwn`. The wording is the bot's voice in Slack; the terminal has its own.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime

from ..runs.notices import (
    AllowanceGranted,
    AllowanceList,
    AllowanceRevoked,
    AllowanceUsed,
    AwaitingDecision,
    AwaitsYou,
    BreakGlassUsed,
    CallLink,
    CancelledBeforeStart,
    CardNotPosted,
    ChannelNotAllowed,
    DecisionNotRecorded,
    DelegationAnswer,
    EarlierQueued,
    EditAwaitsPreview,
    FinishNote,
    FreezeAnnounced,
    FreezeAnswer,
    Help,
    NotAllowed,
    NotApprovable,
    NotEditable,
    NothingCancelled,
    NothingRevoked,
    NothingToCancel,
    Notice,
    NotSaved,
    OnCallNow,
    PendingList,
    Queued,
    Recovered,
    Reminder,
    RootPostFailed,
    RunCancelled,
    RunCrashed,
    RunFailed,
    RunRefused,
    RunStopped,
    StillWorking,
    ToolNotRun,
    ToolRan,
    UnknownRequest,
    stopped_text,
)
from ..runs.views import AllowanceInfo
from ..store import Delegation
from ..words import count_verb, format_duration
from .answers import cancel_reason_text, decision_reason_text, help_text, pending_text, refusal_text
from .card_notes import lock_text
from .freezes import freeze_notice_text
from .mrkdwn import code_span, escape_mrkdwn, outcome_text, preformatted, slack_date, user_mention

__all__ = [
    "OUTPUT_INLINE",
    "Attachment",
    "Rendered",
    "allowance_line",
    "awaits_you_text",
    "delegation_lines",
    "oncall_text",
    "queue_notice_text",
    "render",
    "ux_text",
    "waited_text",
]


OUTPUT_INLINE = 1500
"""Longest tool output (escaped, fences included) shown in the thread; the rest is attached."""
_SHORT_OUTPUT = 200

_FINISH_NOTES = {
    "length": "_(The answer was cut off: the model hit its length limit.)_",
    "content_filter": "_(The provider's content filter stopped the answer.)_",
    "max_rounds": "_(I stopped after the maximum number of tool rounds.)_",
}
_NOT_HERE = (
    "Sorry, I'm not set up to act in this channel. "
    "Ask an admin to add it to `channels` in the OpsGate policy file."
)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file to upload after the message (raw content, never mrkdwn)."""

    filename: str
    content: str


@dataclass(frozen=True, slots=True)
class Rendered:
    """One Slack message, and the file that goes with it (if any)."""

    text: str
    attachment: Attachment | None = None


def render(notice: Notice) -> Rendered:
    """The Slack message for `notice`."""
    match notice:
        case ToolRan():
            return _tool_ran(notice)
        case (
            ChannelNotAllowed()
            | Queued()
            | AwaitingDecision()
            | EarlierQueued()
            | StillWorking()
            | RootPostFailed()
        ):
            return Rendered(_intake_text(notice))
        case RunStopped():
            return Rendered(
                ":octagonal_sign: " + stopped_text(notice, person=user_mention, tool=_code)
            )
        case NotSaved(what=what):
            return Rendered(
                f":warning: I couldn't save your {what}: my database refuses writes right now, "
                "so I did not act on it. Please try again later (the bot's operator has been "
                "alerted by its health check)."
            )
        case (
            RunFailed()
            | RunRefused()
            | RunCrashed()
            | FinishNote()
            | ToolNotRun()
            | CardNotPosted()
            | Reminder()
            | Recovered()
        ):
            return Rendered(_run_text(notice))
        case (
            AllowanceUsed()
            | AllowanceGranted()
            | AllowanceList()
            | AllowanceRevoked()
            | NothingRevoked()
        ):
            return Rendered(ux_text(notice))
        case FreezeAnnounced() | BreakGlassUsed() | FreezeAnswer():
            return Rendered(freeze_notice_text(notice))
        case AwaitsYou():
            return Rendered(awaits_you_text(notice))
        case OnCallNow():
            return Rendered(oncall_text(notice))
        case DelegationAnswer(text=text):
            return Rendered(text)
        case _:
            return Rendered(_answer_text(notice))


def _intake_text(
    notice: ChannelNotAllowed
    | Queued
    | AwaitingDecision
    | EarlierQueued
    | StillWorking
    | RootPostFailed,
) -> str:
    match notice:
        case ChannelNotAllowed():
            return _NOT_HERE
        case Queued(limit=limit, ahead=ahead):
            going = count_verb(limit, "run", "is", "are")
            text = f":hourglass_flowing_sand: Queued: {going} already going "
            text += "in this channel, "
            if ahead:
                text += f"and {ahead} more are waiting ahead of this one. "
            else:
                text += "which is the limit. "
            return text + "I'll start as soon as a slot frees up."
        case AwaitingDecision(calls=calls):
            links = ", ".join(_call_link(c) for c in calls)
            return (
                "This thread is waiting for a decision on "
                + (links or "the request above")
                + ". Approve or reject it on the card first (or write `cancel` to end the run); "
                "I have not started anything new."
            )
        case EarlierQueued():
            return (
                "An earlier message in this thread is still queued; I'll answer it first. "
                "Send this one again once I have."
            )
        case StillWorking():
            return (
                "I'm still working on the previous request in this thread; "
                "I'll answer this one when it's done."
            )
        case RootPostFailed(error=error):
            return (
                f"I couldn't post in this channel ({escape_mrkdwn(error)}). "
                "Invite me first (`/invite @OpsGate`), or use a channel I'm in."
            )


def _run_text(
    notice: RunFailed
    | RunRefused
    | RunCrashed
    | FinishNote
    | ToolNotRun
    | CardNotPosted
    | Reminder
    | Recovered,
) -> str:
    match notice:
        case RunFailed(error=error):
            return (
                ":warning: I couldn't finish: "
                + escape_mrkdwn(error or "the model request failed")
                + "\nYour message is saved: reply in this thread (say, “try again”) to continue."
            )
        case RunRefused(message=message):
            return f":warning: {escape_mrkdwn(message)}"
        case RunCrashed(error_type=error_type):
            return (
                f":x: Something went wrong inside OpsGate ({escape_mrkdwn(error_type)}). "
                "The conversation is saved; send a message to try again."
            )
        case FinishNote(reason=reason):
            return _FINISH_NOTES[reason]
        case ToolNotRun(tool=tool, outcome=outcome):
            return f":no_entry_sign: `{escape_mrkdwn(tool)}` did not run: {outcome_text(outcome)}"
        case CardNotPosted(tool=tool, error=error, gave_up=True):
            return (
                f":warning: I still couldn't post the approval card for `{escape_mrkdwn(tool)}` "
                f"after several tries ({escape_mrkdwn(error)}); I'll try again when I restart. "
                "Nothing runs without a decision: the request expires on its own, or write "
                "`cancel` to drop it now."
            )
        case CardNotPosted(tool=tool, error=error):
            return (
                f":warning: I couldn't post the approval card for `{escape_mrkdwn(tool)}` "
                f"({escape_mrkdwn(error)}). Nothing runs without a decision: the "
                "request expires on its own, or write `cancel` to drop it now."
            )
        case Reminder(calls=calls, expires_at=expires_at):
            names = ", ".join(_call_link(call) for call in calls)
            one = len(calls) == 1
            return (
                f":alarm_clock: {names} {'still waits' if one else 'still wait'} for a decision; "
                f"{'it expires' if one else 'they expire'} {slack_date(expires_at)} and will "
                "then not run."
            )
        case Recovered(interrupted=interrupted):
            if interrupted:
                names = ", ".join(f"`{escape_mrkdwn(t)}`" for t in interrupted)
                return (
                    f":warning: OpsGate restarted while {names} was running. Its outcome is "
                    "unknown and it was not run again; check the system before retrying."
                )
            return ":warning: OpsGate restarted during this run. Send a message to continue."


def _answer_text(
    notice: RunCancelled
    | CancelledBeforeStart
    | NothingToCancel
    | NothingCancelled
    | NotAllowed
    | UnknownRequest
    | DecisionNotRecorded
    | NotApprovable
    | NotEditable
    | EditAwaitsPreview
    | PendingList
    | Help,
) -> str:
    match notice:
        case RunCancelled(by=by):
            return (
                f":no_entry_sign: Run cancelled by {user_mention(by)}. Nothing of the "
                "request above was run. Send a new message to start again."
            )
        case CancelledBeforeStart(by=by):
            return f":no_entry_sign: Cancelled by {user_mention(by)} before it started."
        case NothingToCancel():
            return (
                "There is nothing to cancel here: `cancel` ends a run while it waits for approval."
            )
        case NothingCancelled(why=why):
            return cancel_reason_text(why)
        case NotAllowed(refusal=refusal):
            return refusal_text(refusal)
        case UnknownRequest():
            return "I don't know this approval request (it may belong to another OpsGate install)."
        case DecisionNotRecorded(why=why):
            return decision_reason_text(why)
        case NotApprovable(why=why):
            return lock_text(why)
        case NotEditable(tool=tool, field=field, length=length, limit=limit):
            return (
                f":no_entry: {_code(field)} of {_code(tool)} is {length:,} characters long, "
                f"more than an edit form holds ({limit:,}), so it cannot be edited here: a cut "
                "value would run cut. The full arguments are in the file attached to the card; "
                "approve or reject the call as it is, or ask again with the change."
            )
        case EditAwaitsPreview(tool=tool):
            return (
                f":mag: Edit saved. The edited {_code(tool)} call has a preview of its own, "
                "now on the card: look at it and approve there (the edit counted no approval)."
            )
        case PendingList(entries=entries):
            return pending_text(entries)
        case Help(info=info):
            return help_text(info)


def _code(name: str) -> str:
    return f"`{escape_mrkdwn(name)}`"


def _call_link(call: CallLink) -> str:
    name = f"`{escape_mrkdwn(call.tool)}`"
    return f"<{call.permalink}|{name}>" if call.permalink else name


def _tool_ran(notice: ToolRan) -> Rendered:
    name = escape_mrkdwn(notice.tool)
    content = notice.content
    icon = ":x:" if notice.is_error else ":white_check_mark:"
    stripped = content.strip()
    if len(content) <= _SHORT_OUTPUT and "\n" not in stripped:
        first_line = stripped.splitlines()[0] if stripped else "(no output)"
        return Rendered(f"{icon} `{name}`: {escape_mrkdwn(first_line)}")
    shown, cut = preformatted(content, OUTPUT_INLINE)
    attachment = Attachment(f"{notice.tool}-{notice.call_id}.txt", content) if cut else None
    return Rendered(f"{icon} `{name}` output:\n{shown}", attachment)


# -- ux_text -------------------------------------------------------------------------------------
# The allowance notices in Slack's words (mrkdwn). Tool names and shape labels come from the
# model's arguments, so they are untrusted: they reach mrkdwn only through `bot.slack.mrkdwn`.


UxNotice = AllowanceUsed | AllowanceGranted | AllowanceList | AllowanceRevoked | NothingRevoked


def allowance_line(allowance: AllowanceInfo) -> str:
    """One allowance in words: id, tool, shape, channel, who granted it, until when."""
    return (
        f"allowance `{allowance.id}`: {code_span(allowance.tool)} "
        f"{code_span(allowance.label, 200)} in <#{allowance.channel}>, granted by "
        f"{user_mention(allowance.granted_by)}, until {slack_date(allowance.expires_at)}"
    )


def ux_text(notice: UxNotice) -> str:
    match notice:
        case AllowanceUsed(tool=tool, allowance=allowance):
            return (
                f":unlock: {code_span(tool)} ran without a card under {allowance_line(allowance)}"
            )
        case AllowanceGranted(allowance=allowance):
            line = allowance_line(allowance)
            return f":unlock: New {line}. `/opsgate allowances` lists and revokes allowances."
        case AllowanceList(channel=channel, entries=entries):
            if not entries:
                return f"No allowances are active in <#{channel}>."
            return "\n".join(f"• {allowance_line(a)}" for a in entries)
        case AllowanceRevoked(allowance=allowance, by=by):
            return f"{user_mention(by)} revoked {allowance_line(allowance)}."
        case NothingRevoked(why=why):
            return f"Nothing revoked: {escape_mrkdwn(why)}."


def queue_notice_text(limit: int, waiting: int) -> str:
    """A channel's one notice for a burst of queued messages (`bot.slack.queue_notice`)."""
    if not waiting:
        return ":white_check_mark: The queue of this channel is empty: every request has started."
    going = count_verb(limit, "run", "is", "are")
    waits = count_verb(waiting, "request", "is", "are")
    return (
        f":hourglass_flowing_sand: Queued: {going} already going in this channel, which is the "
        f"limit, and {waits} waiting. I'll start each, oldest first, as soon as a slot frees up."
    )


# -- the ladder's direct messages --------------------------------------------------------------
# The direct message an approver gets when a call waits for them: a reminder, or the news
# that an escalation step added them (`bot.runs.ladder`).


@functools.lru_cache(maxsize=64)
def awaits_you_text(notice: AwaitsYou) -> str:
    """One line saying what waits, for how long, who asked, and a link to its card. Kept for
    the last few notices: a tick writes the same one to each of a call's approvers."""
    name = f"`{escape_mrkdwn(notice.call.tool)}`"
    card = f"<{notice.call.permalink}|the card>" if notice.call.permalink else "its card"
    asked = f" asked by {user_mention(notice.requested_by)}" if notice.requested_by else ""
    waited = format_duration(notice.waited, approximate=True)
    lead = (
        ":arrow_up: Nobody has decided yet, so this was escalated to you"
        if notice.why == "escalated"
        else ":alarm_clock: Reminder: this waits for your decision"
    )
    return (
        f"{lead}: {name}{asked}, waiting {waited}: {escape_mrkdwn(notice.summary)}. "
        f"Decide on {card}."
    )


def oncall_text(notice: OnCallNow) -> str:
    """`/opsgate who`: one line per on-call name of the policy."""
    if not notice.people:
        return "The policy names no on-call rotation (`[oncall.<name>]`)."
    lines = [
        f"• `oncall:{escape_mrkdwn(name)}`: "
        + (user_mention(who) if who else "nobody (no approval through this name)")
        for name, who in notice.people
    ]
    return ":telephone_receiver: On call now:\n" + "\n".join(lines)


def waited_text(asked_at: datetime) -> str:
    """How long ago a call began to wait, as each reader's Slack shows it ("12 minutes ago")."""
    moment = asked_at if asked_at.tzinfo is not None else asked_at.replace(tzinfo=UTC)
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} {{time}} ({{ago}})|{fallback}>"


def delegation_lines(user: str, held: tuple[Delegation, ...]) -> str:
    """The Home tab's delegations of `user`: who decides for them, and for whom they decide."""
    lines = []
    for d in held:
        until = slack_date(d.until)
        if d.delegator == user:
            lines.append(f"• {user_mention(d.delegate)} decides for you until {until}")
        else:
            lines.append(f"• You decide for {user_mention(d.delegator)} until {until}")
    return "\n".join(lines)
