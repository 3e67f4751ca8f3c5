"""The notices the run service gives its `ThreadOutput`: what happened, with its data.

Each is a frozen dataclass with a `Literal` kind; renderers `match` on them. Text in them is raw
(model output, tool output, error messages): the renderer escapes it. See `bot.runs.output`
for the interface that takes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from agent_core.messages import CallOutcome

from ..approvals import Refused
from ..store.models import CancelReason, CardLock, DecisionReason
from ..words import format_duration
from .views import AllowanceInfo, ChannelHelp, PendingEntry

__all__ = [
    "AllowanceGranted",
    "AllowanceList",
    "AllowanceRevoked",
    "AllowanceUsed",
    "AwaitingDecision",
    "AwaitsYou",
    "BreakGlassUsed",
    "CallLink",
    "CancelledBeforeStart",
    "CardNotPosted",
    "ChannelNotAllowed",
    "DecisionNotRecorded",
    "DelegationAnswer",
    "EarlierQueued",
    "FinishNote",
    "FreezeAnnounced",
    "FreezeAnswer",
    "Help",
    "NotAllowed",
    "NotApprovable",
    "NotEditable",
    "NotSaved",
    "NothingCancelled",
    "NothingRevoked",
    "NothingToCancel",
    "Notice",
    "OnCallNow",
    "PendingList",
    "Queued",
    "Recovered",
    "Reminder",
    "RootPostFailed",
    "RunCancelled",
    "RunCrashed",
    "RunFailed",
    "RunRefused",
    "RunStopped",
    "StillWorking",
    "ToolNotRun",
    "ToolRan",
    "UnknownRequest",
    "stopped_text",
]


@dataclass(frozen=True, slots=True)
class CallLink:
    """A gated call, linked to its card when the card could be found."""

    tool: str
    permalink: str | None


# --- notices: intake and queue -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChannelNotAllowed:
    """The policy does not let the bot act in `channel`."""

    channel: str
    kind: Literal["channel_not_allowed"] = "channel_not_allowed"


@dataclass(frozen=True, slots=True)
class Queued:
    """The channel is at its `limit` of runs; `ahead` more wait before this one."""

    limit: int
    ahead: int
    kind: Literal["queued"] = "queued"


@dataclass(frozen=True, slots=True)
class AwaitingDecision:
    """A new message came while the thread waits for decisions on `calls`: nothing started."""

    calls: tuple[CallLink, ...]
    kind: Literal["awaiting_decision"] = "awaiting_decision"


@dataclass(frozen=True, slots=True)
class EarlierQueued:
    """A new message came while an earlier one of the thread is still queued."""

    kind: Literal["earlier_queued"] = "earlier_queued"


@dataclass(frozen=True, slots=True)
class StillWorking:
    """A new message came while the thread's run is going: it is answered when that run ends."""

    kind: Literal["still_working"] = "still_working"


@dataclass(frozen=True, slots=True)
class RootPostFailed:
    """`/opsgate <request>` could not post the request's thread root in the channel."""

    error: str
    kind: Literal["root_post_failed"] = "root_post_failed"


@dataclass(frozen=True, slots=True)
class NotSaved:
    """The database refused to save a message or a click (read-only, full disk): it was not
    acted on, and the person should try again once the bot's operator fixed it."""

    what: Literal["message", "click"]
    kind: Literal["not_saved"] = "not_saved"


# --- notices: a run ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunFailed:
    """The model request failed; the message is saved and a reply continues."""

    error: str | None
    kind: Literal["run_failed"] = "run_failed"


@dataclass(frozen=True, slots=True)
class RunRefused:
    """The agent refused to run (an `AgentCoreError`, e.g. a bad session); `message` says why."""

    message: str
    kind: Literal["run_refused"] = "run_refused"


@dataclass(frozen=True, slots=True)
class RunCrashed:
    """A bug inside OpsGate ended the run; `error_type` is the exception's class name."""

    error_type: str
    kind: Literal["run_crashed"] = "run_crashed"


@dataclass(frozen=True, slots=True)
class FinishNote:
    """The answer ended early for `reason`."""

    reason: Literal["length", "content_filter", "max_rounds"]
    kind: Literal["finish_note"] = "finish_note"


@dataclass(frozen=True, slots=True)
class ToolRan:
    """A tool ran (or failed with an error, `is_error`); `content` is its raw output."""

    tool: str
    call_id: str
    content: str
    is_error: bool = False
    kind: Literal["tool_ran"] = "tool_ran"


@dataclass(frozen=True, slots=True)
class ToolNotRun:
    """A gated call did not run: rejected, expired or cancelled (the typed outcome)."""

    tool: str
    outcome: CallOutcome
    kind: Literal["tool_not_run"] = "tool_not_run"


@dataclass(frozen=True, slots=True)
class CardNotPosted:
    """The approval card for `tool` could not be posted (`error`); the call still expires."""

    tool: str
    error: str
    gave_up: bool = False
    """The background tries failed too: only the next start-up tries again."""
    kind: Literal["card_not_posted"] = "card_not_posted"


@dataclass(frozen=True, slots=True)
class Reminder:
    """The `calls` of one batch still wait; the first expires at `expires_at` (aware UTC)."""

    calls: tuple[CallLink, ...]
    expires_at: datetime
    kind: Literal["reminder"] = "reminder"


@dataclass(frozen=True, slots=True)
class Recovered:
    """OpsGate restarted during the thread's run; `interrupted` tools were running then."""

    interrupted: tuple[str, ...] = ()
    kind: Literal["recovered"] = "recovered"


# --- notices: cancel and decisions ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunCancelled:
    """`by` cancelled the run waiting for approval; nothing of it ran."""

    by: str
    kind: Literal["run_cancelled"] = "run_cancelled"


@dataclass(frozen=True, slots=True)
class RunStopped:
    """A run that was going was stopped: `cancelled` by `by`, past its `deadline` (the
    per-run limit, `seconds`), or because its answer grew past `chars` characters (what came
    was kept). `interrupted` tools were running then: never run again."""

    why: Literal["cancelled", "deadline", "answer_too_long"]
    by: str | None = None
    seconds: float | None = None
    chars: int | None = None
    interrupted: tuple[str, ...] = ()
    kind: Literal["run_stopped"] = "run_stopped"


@dataclass(frozen=True, slots=True)
class CancelledBeforeStart:
    """`by` withdrew the thread's queued message before its run started."""

    by: str
    kind: Literal["cancelled_before_start"] = "cancelled_before_start"


@dataclass(frozen=True, slots=True)
class NothingToCancel:
    """`cancel` was written in a thread with no paused run and no queued message."""

    kind: Literal["nothing_to_cancel"] = "nothing_to_cancel"


@dataclass(frozen=True, slots=True)
class NothingCancelled:
    """A cancel found nothing to end (the run resumed first, or the card is old): `why`."""

    why: CancelReason
    kind: Literal["nothing_cancelled"] = "nothing_cancelled"


@dataclass(frozen=True, slots=True)
class NotAllowed:
    """An approvals rule refused the person (private notice)."""

    refusal: Refused
    kind: Literal["not_allowed"] = "not_allowed"


@dataclass(frozen=True, slots=True)
class UnknownRequest:
    """A click named an approval id this install does not know."""

    kind: Literal["unknown_request"] = "unknown_request"


@dataclass(frozen=True, slots=True)
class DecisionNotRecorded:
    """A click changed nothing (already decided, expired, already approved by them): `why`."""

    why: DecisionReason
    kind: Literal["decision_not_recorded"] = "decision_not_recorded"


@dataclass(frozen=True, slots=True)
class NotApprovable:
    """An Approve click on a card that may not be approved (`why`); rejecting still works."""

    why: CardLock
    kind: Literal["not_approvable"] = "not_approvable"


@dataclass(frozen=True, slots=True)
class NotEditable:
    """An Edit click on a call whose arguments the form cannot hold whole (`length` characters
    in one field, over `limit`): no form is opened (a cut value would run cut); the full text
    is in the card's attached file."""

    tool: str
    field: str
    length: int
    limit: int
    kind: Literal["not_editable"] = "not_editable"


@dataclass(frozen=True, slots=True)
class EditAwaitsPreview:
    """An edit was saved, but its edited call has a preview nobody has seen yet: the edit
    counted no approval; the card now shows the preview, and Approve is clicked there."""

    tool: str
    kind: Literal["edit_awaits_preview"] = "edit_awaits_preview"


# --- notices: answers to commands ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingList:
    """The approvals a person may decide now."""

    entries: tuple[PendingEntry, ...]
    kind: Literal["pending_list"] = "pending_list"


@dataclass(frozen=True, slots=True)
class Help:
    """Usage, and the policy of one channel."""

    info: ChannelHelp
    kind: Literal["help"] = "help"


@dataclass(frozen=True, slots=True)
class AllowanceUsed:
    """A call ran without a card under `allowance` (posted in the thread as one line)."""

    tool: str
    allowance: AllowanceInfo
    kind: Literal["allowance_used"] = "allowance_used"


@dataclass(frozen=True, slots=True)
class AllowanceGranted:
    """`allowance` was granted from a card in this thread."""

    allowance: AllowanceInfo
    kind: Literal["allowance_granted"] = "allowance_granted"


@dataclass(frozen=True, slots=True)
class AllowanceList:
    """The active allowances of a channel (private answer to `/opsgate allowances`)."""

    channel: str
    entries: tuple[AllowanceInfo, ...]
    kind: Literal["allowance_list"] = "allowance_list"


@dataclass(frozen=True, slots=True)
class AllowanceRevoked:
    """`by` ended allowance `allowance` early."""

    allowance: AllowanceInfo
    by: str
    kind: Literal["allowance_revoked"] = "allowance_revoked"


@dataclass(frozen=True, slots=True)
class NothingRevoked:
    """A Revoke click changed nothing: `why`."""

    why: str
    kind: Literal["nothing_revoked"] = "nothing_revoked"


# -- freezes ------------------------------------------------------------------------------------
# Change freezes and break-glass: what is announced in the channels a freeze covers,
# and the answers to `/opsgate freeze`, `/opsgate unfreeze` and "Mark reviewed".


@dataclass(frozen=True, slots=True)
class FreezeAnnounced:
    """A freeze window began (`started`) or ended, announced in each channel it covers."""

    label: str
    until: datetime
    started: bool
    message: str | None = None
    started_by: str | None = None
    kind: Literal["freeze_announced"] = "freeze_announced"


@dataclass(frozen=True, slots=True)
class BreakGlassUsed:
    """The loud notice: `by` broke glass on a call of `tool` during `freeze`, because `reason`."""

    tool: str
    by: str
    reason: str
    freeze: str
    permalink: str | None = None
    kind: Literal["break_glass_used"] = "break_glass_used"


@dataclass(frozen=True, slots=True)
class FreezeAnswer:
    """A private answer about freezes or break-glass, in plain words (escaped when drawn)."""

    text: str
    kind: Literal["freeze_answer"] = "freeze_answer"


@dataclass(frozen=True, slots=True)
class AwaitsYou:
    """A direct message to an approver: `call` waits for their decision (`why`: "reminder",
    or "escalated": they were just added by its escalation ladder)."""

    call: CallLink
    summary: str
    requested_by: str | None
    waited: timedelta
    why: Literal["reminder", "escalated"]
    kind: Literal["awaits_you"] = "awaits_you"


@dataclass(frozen=True, slots=True)
class OnCallNow:
    """`/opsgate who`: each on-call name of the policy and who is on call now (None: nobody)."""

    people: tuple[tuple[str, str | None], ...]
    kind: Literal["oncall_now"] = "oncall_now"


@dataclass(frozen=True, slots=True)
class DelegationAnswer:
    """`/opsgate delegate`: what happened, in words (mrkdwn, drawn as written)."""

    text: str
    kind: Literal["delegation_answer"] = "delegation_answer"


Notice = (
    ChannelNotAllowed
    | Queued
    | AwaitingDecision
    | EarlierQueued
    | StillWorking
    | RootPostFailed
    | NotSaved
    | RunFailed
    | RunRefused
    | RunCrashed
    | FinishNote
    | ToolRan
    | ToolNotRun
    | CardNotPosted
    | Reminder
    | Recovered
    | RunCancelled
    | RunStopped
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
    | Help
    | AllowanceUsed
    | AllowanceGranted
    | AllowanceList
    | AllowanceRevoked
    | NothingRevoked
    | FreezeAnnounced
    | BreakGlassUsed
    | FreezeAnswer
    | AwaitsYou
    | OnCallNow
    | DelegationAnswer
)
"""Everything the run service says. Private ones (`tell`, or a command's answer) are
`NotAllowed`, `NothingToCancel`, `NothingCancelled`, `UnknownRequest`, `DecisionNotRecorded`,
`NotApprovable`, `NotEditable`, `EditAwaitsPreview`,
`RootPostFailed`, `NotSaved` (a click), `ChannelNotAllowed` (from `/opsgate`), `PendingList`
and `Help`."""


def stopped_text(
    notice: RunStopped, *, person: Callable[[str], str] = str, tool: Callable[[str], str] = str
) -> str:
    """Why a going run was stopped, and what that means for a tool it was running. `person`
    and `tool` mark up a user id and a tool name (the terminal shows them as they are;
    Slack as mentions and code). Written once for every output."""
    if notice.why == "cancelled":
        text = f"Run stopped by {person(notice.by or 'someone')}."
    elif notice.why == "answer_too_long":
        text = (
            f"I stopped this answer at {notice.chars or 0:,} characters, the limit for one "
            "answer: what came is above."
        )
    else:
        limit = format_duration(timedelta(seconds=notice.seconds or 0))
        text = f"I stopped this run: it went on longer than {limit}, the limit for one run."
    if notice.interrupted:
        names = ", ".join(tool(t) for t in notice.interrupted)
        text += (
            f" {names} was running then: its outcome is unknown and it will not run again; "
            "check the system before retrying."
        )
    return text + " The conversation is saved: send a message to continue."
