"""Why a decision or a cancel changed nothing, as typed values the outputs render.

The store returns these (never sentences); `bot.slack` and the terminal turn them into words.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from .quorum import Shortfall
from .states import CallStatus, RunState

__all__ = [
    "AlreadyApprovedByYou",
    "AlreadyDecided",
    "ArgumentsChanged",
    "BatchMovedOn",
    "CallExpired",
    "CancelReason",
    "DecisionReason",
    "EditNotAllowed",
    "MoreApprovalsNeeded",
    "NeedsNoApproval",
    "NoAllowanceOffered",
    "NotWaiting",
    "PreviewChanged",
    "SelfAllow",
]


@dataclass(frozen=True, slots=True)
class AlreadyDecided:
    """Somebody decided first (or cancelled the run): who (user ids), when, as what."""

    status: CallStatus
    by: tuple[str, ...]
    at: datetime | None
    kind: Literal["already_decided"] = "already_decided"


@dataclass(frozen=True, slots=True)
class CallExpired:
    """Nobody decided within the time limit (`ttl` in words); the call did not run."""

    at: datetime | None
    ttl: str | None
    kind: Literal["expired"] = "expired"


@dataclass(frozen=True, slots=True)
class NeedsNoApproval:
    """The call is a held sibling: it runs once the batch is decided."""

    kind: Literal["needs_no_approval"] = "needs_no_approval"


@dataclass(frozen=True, slots=True)
class AlreadyApprovedByYou:
    """N-of-M: this person's approval is counted already."""

    kind: Literal["already_approved_by_you"] = "already_approved_by_you"


@dataclass(frozen=True, slots=True)
class MoreApprovalsNeeded:
    """Recorded, not final: `approvals` of `required` so far (`missing`: each requirement
    not met yet, when the call has several)."""

    approvals: int
    required: int
    missing: tuple[Shortfall, ...] = ()
    kind: Literal["more_approvals_needed"] = "more_approvals_needed"


@dataclass(frozen=True, slots=True)
class BatchMovedOn:
    """The card belongs to an earlier request of the thread."""

    kind: Literal["batch_moved_on"] = "batch_moved_on"


@dataclass(frozen=True, slots=True)
class NotWaiting:
    """The run no longer waits for approval (it resumed first, or ended): its `state`."""

    state: RunState
    kind: Literal["not_waiting"] = "not_waiting"


@dataclass(frozen=True, slots=True)
class EditNotAllowed:
    """The policy does not let people edit this tool's calls (`allow_edit = false`)."""

    tool: str
    kind: Literal["edit_not_allowed"] = "edit_not_allowed"


@dataclass(frozen=True, slots=True)
class SelfAllow:
    """The requester asked for an allowance on their own call."""

    kind: Literal["self_allow"] = "self_allow"


@dataclass(frozen=True, slots=True)
class NoAllowanceOffered:
    """The policy offers no "Allow for" for this tool in this channel."""

    tool: str
    kind: Literal["no_allowance_offered"] = "no_allowance_offered"


@dataclass(frozen=True, slots=True)
class ArgumentsChanged:
    """The click came from a card drawn for other arguments (`shown`): the call was edited
    since, and now has digest `now`. The click counts for nothing; the card is redrawn."""

    shown: str
    now: str
    kind: Literal["arguments_changed"] = "arguments_changed"


@dataclass(frozen=True, slots=True)
class PreviewChanged:
    """The call's preview (its read-only command's output) is not what the clicked card showed:
    it was run again and changed, or the card was drawn before. The click counts for nothing;
    the card shows the new preview."""

    kind: Literal["preview_changed"] = "preview_changed"


DecisionReason = (
    AlreadyDecided
    | ArgumentsChanged
    | PreviewChanged
    | CallExpired
    | NeedsNoApproval
    | AlreadyApprovedByYou
    | MoreApprovalsNeeded
    | EditNotAllowed
    | SelfAllow
    | NoAllowanceOffered
)
CancelReason = BatchMovedOn | NotWaiting
