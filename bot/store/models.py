"""What the store hands out and takes: frozen pydantic rows, the vocabularies of their states,
the typed reasons a decision or a cancel that changed nothing returns, and the requirements a
gated call's approvals are counted toward (`Quorum`, `QuorumState`, the policy's `Ruling`).

The states and the reasons are the rows' own words (a row's `status` is a `CallStatus`, a
`DecisionOutcome` carries its `DecisionReason`), so they stand here with the rows. The store
returns reasons, never sentences; `bot.slack` and the terminal turn them into words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_core.approvals import undecided_calls

__all__ = [
    "ONE_APPROVAL",
    "AllowOutcome",
    "AllowanceGrant",
    "AllowanceRow",
    "AlreadyApprovedByYou",
    "AlreadyDecided",
    "ArgumentsChanged",
    "AssistantThread",
    "AuditEvent",
    "AuditRow",
    "BatchMovedOn",
    "CallExpired",
    "CallStatus",
    "CancelOutcome",
    "CancelReason",
    "CardLock",
    "DecisionOutcome",
    "DecisionReason",
    "EditNotAllowed",
    "EnqueueOutcome",
    "HomeViewer",
    "InboxItem",
    "InboxKind",
    "MoreApprovalsNeeded",
    "NeedsNoApproval",
    "NoAllowanceOffered",
    "NotWaiting",
    "PendingApproval",
    "PreviewChanged",
    "QueueItem",
    "QueueState",
    "Quorum",
    "QuorumState",
    "RecoveredSession",
    "Ruling",
    "RunState",
    "SelfAllow",
    "SessionRow",
    "Shortfall",
    "StoredInput",
    "StoredPreview",
    "ToolCallRow",
    "batch_complete",
]

# -- the states a session, a ledger row, a queue item and an inbox row can be in ---------

RunState = Literal["idle", "running", "awaiting_approval", "resuming", "failed"]
"""A session's run state (`docs/architecture.md`, "Run states"). Only the store's named
transitions change it: `end_run`, `claim_resume`, `resume_started`, the pause (`record_pause`),
cancel (`cancel_batch`), queue (`claim_queued` starts a run) and recovery steps."""

CallStatus = Literal[
    "pending", "approved", "rejected", "expired", "executing", "done", "interrupted", "cancelled"
]
"""A ledger row's status. `pending` rows with `needs_approval=False` are held siblings;
`cancelled` rows never ran because someone cancelled the run while it waited for approval."""

CardLock = Literal["arguments_not_attached", "forbidden"]
"""Why a card may not be approved: `arguments_not_attached`, the arguments were too long to
show on the card and the file holding them could not be attached; `forbidden`, a policy rule
forbids the call (it never runs; the model is told the rule's justification)."""

QueueState = Literal["queued", "started", "done", "cancelled"]
"""A run-queue item's state: waiting for a slot, its run started, its run ended, or withdrawn."""

InboxKind = Literal["message", "slash", "request"]
"""What an inbox row holds: a message to the bot (mention, DM, thread reply) or `/opsgate`."""


# -- why a decision or a cancel changed nothing ----------------------------------------------


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


AuditEvent = Literal[
    "request",
    "decision",
    "refusal",
    "expiry",
    "execution_start",
    "execution_end",
    "interrupted",
    "cancel",
    "reminder",
    "edited",
    "allowance",
    "allowance_revoked",
    "resume_reclaimed",
    "run_requeued",
    "run_stopped",
]
"""The events the store itself writes; `Store.audit` accepts any other name too."""

_FROZEN = ConfigDict(frozen=True)


# -- the requirements a gated call's approvals are counted toward ------------------------------
# A call whose parts match several rules that ask carries one `Quorum` per rule (its key, its
# words, how many distinct approvers it needs); the ledger keeps them with the approvals'
# counts (`QuorumState`), a decision takes the policy's `Ruling`, and a reason names each
# requirement not met yet (`Shortfall`). The counting itself is `rules.tally`.


class Quorum(BaseModel):
    """One requirement: `needed` distinct approvers of the set that `key` names."""

    model_config = _FROZEN

    key: str
    """The rule's name (`tools.<tool>.rules[<i>]`), or "channel": its approvers are the
    channel's (or the defaults')."""
    label: str = ""
    """The requirement in words, for the card and the audit log."""
    needed: int = Field(ge=1)


class QuorumState(BaseModel):
    """What the ledger keeps with a pending call (`tool_calls.quorum`, JSON): its
    requirements, and for each approver the keys their approval counts toward."""

    model_config = _FROZEN

    needs: tuple[Quorum, ...]
    counts: dict[str, tuple[str, ...]] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ruling:
    """What the policy ruled for a decision on a call, as the store records and counts it:
    `rule`, who may decide (the approvers' rule that let the decider in); `policy_rule`, the
    rule `tools.<tool>.rules[<i>]` that gated the call, and `policy_match`, what it matches
    in words (both on every decision and refusal row); and the requirements to meet at once
    (`requirements`; none: one, of `required_approvals` distinct approvers). Built once where
    the run service consults the policy, so every decision method takes the same value."""

    rule: str | None = None
    policy_rule: str | None = None
    policy_match: str | None = None
    required_approvals: int = 1
    requirements: tuple[Quorum, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "requirements", tuple(self.requirements))
        if self.required_approvals < 1:
            raise ValueError(
                f"required_approvals must be at least 1, not {self.required_approvals!r}"
            )

    @property
    def needs(self) -> tuple[Quorum, ...]:
        """Every requirement of the decision: those given, or one of `required_approvals`."""
        return self.requirements or (Quorum(key="channel", needed=self.required_approvals),)

    def named(self) -> dict[str, str | None]:
        """The rules that applied, as the audit rows name them."""
        rules = (self.rule, self.policy_rule, self.policy_match)
        return dict(zip(("rule", "policy_rule", "policy_match"), rules, strict=True))


ONE_APPROVAL = Ruling()
"""The ruling a decision method assumes when given none: no rule named, one approval."""


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A requirement not met yet: `have` of `needed` approvals toward it."""

    key: str
    label: str
    have: int
    needed: int


# -- the rows ---------------------------------------------------------------------------------


class SessionRow(BaseModel):
    """One Slack thread's agent session."""

    model_config = _FROZEN

    id: str
    team_id: str
    channel_id: str
    thread_ts: str
    state: RunState
    requester: str | None = None
    """Slack user id of whoever asked for the current (or last) run."""
    error: str | None = None
    """Why the last run failed, when `state` is `failed`."""
    batch_id: str | None = None
    """The latest paused batch; `Store.batch_calls` returns its rows."""
    created_at: datetime
    updated_at: datetime


class ToolCallRow(BaseModel):
    """One tool call in the ledger. `id` is opaque and random: it is what a Slack button carries."""

    model_config = _FROZEN

    id: str
    session_id: str
    batch_id: str | None
    """The paused batch the call belongs to; None for calls of a round that did not pause."""
    message_seq: int
    """Position in the history of the assistant message that asked for the call."""
    position: int
    """Index of the call among that message's calls (the model's order)."""
    call_id: str
    """The provider's id: unique within one assistant message, not globally."""
    name: str
    arguments: str
    """Canonical JSON (`agent_core.canonical_arguments`); a JSON string if the model sent junk."""
    digest: str
    needs_approval: bool
    status: CallStatus
    requested_by: str | None = None
    decided_by: str | None = None
    decided_team: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    result: str | None = None
    is_error: bool | None = None
    card_channel: str | None = None
    card_ts: str | None = None
    card_drawn: str | None = None
    """What the posted card shows (`bot.store.rules.card_state` when it was drawn); a card
    whose call has moved on is stale and is redrawn at start-up."""
    card_locked: CardLock | None = None
    """Why the card may not be approved (its full arguments could not be shown or attached)."""
    expires_at: datetime | None = None
    ttl: str | None = None
    """The time limit in words ("15m"), for the model's "Expired: ..." message."""
    approvals: tuple[str, ...] = ()
    """Distinct Slack user ids that approved so far (policies may need more than one)."""
    trace_id: str | None = None
    span_id: str | None = None
    """The paused run's span (hex ids), when traces are on: the resumed run links to it and
    the approval span joins its trace (`bot/observability/tracing.py`)."""
    created_at: datetime
    reminded_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    edited_arguments: str | None = None
    """Canonical JSON of the arguments a human changed the call to (`Store.edit_call`); what
    runs. `arguments` keeps the model's own."""
    edited_digest: str | None = None
    edited_by: str | None = None
    preview: str | None = None
    """The last run of the deciding rule's preview, as `StoredPreview` JSON (`preview_run`)."""

    escalation_step: int = 0
    """How many steps of its escalation ladder have passed (`bot.store.ladder`)."""
    reminders_sent: int = 0
    """How many reminder rounds its approvers were sent."""
    quorum: str | None = None
    """Its requirements and which approvals count toward each, as `QuorumState` JSON, once
    a decision stored them (`quorum_state`); None: one requirement every approval counts
    toward."""

    def quorum_state(self) -> QuorumState | None:
        return None if self.quorum is None else QuorumState.model_validate_json(self.quorum)

    def preview_run(self) -> StoredPreview | None:
        return None if self.preview is None else StoredPreview.model_validate_json(self.preview)

    @property
    def tool(self) -> str:
        """The tool's name (an alias of `name`)."""
        return self.name

    def arguments_value(self) -> Any:
        """The canonical arguments parsed back (a dict, or the raw text the model sent)."""
        return json.loads(self.arguments)

    def running_arguments(self) -> Any:
        """What runs once approved: the edited arguments if a human changed them, else the
        model's."""
        return json.loads(self.edited_arguments or self.arguments)

    @property
    def running_digest(self) -> str:
        """The digest a card shows: of the edited call once edited."""
        return self.edited_digest or self.digest


class StoredInput(BaseModel):
    """One file a preview read: its path as written, the absolute path read, what was there
    ("file", "directory", "absent", "unreadable") and the SHA-256 of its content."""

    model_config = _FROZEN

    path: str
    resolved: str
    state: str
    digest: str | None = None
    why: str | None = None


class StoredPreview(BaseModel):
    """One run of a call's preview (a rule's read-only command): what the card shows and the
    approval is bound to (`digest`, the SHA-256 of `output`, and of `inputs` when there are
    any: `bot.tools.preview.bound_digest`)."""

    model_config = _FROZEN

    argv: tuple[str, ...]
    """What ran (empty when a placeholder had no value and nothing could run)."""
    output: str
    exit_status: int | None
    failed: str | None
    """Why the card says "preview failed" (None: it did not fail)."""
    ran_at: datetime
    seconds: float
    digest: str
    tool: str | None = None
    """A custom or MCP tool's preview: the read-only tool that was called (`argv` is empty)."""
    arguments: str | None = None
    """Its arguments, canonical JSON."""
    inputs: tuple[StoredInput, ...] = ()
    """The files it read and their digests (`bot.tools.preview`): the run checks them
    first and refuses if any changed."""


# --- why the store changed nothing: typed, worded by the front ends ---------------------------


class AuditRow(BaseModel):
    """One line of the append-only audit log."""

    model_config = _FROZEN

    id: int
    at: datetime
    event: str
    actor: str | None = None
    """Slack user id, or None for OpsGate itself (expiry, recovery)."""
    session_id: str | None = None
    call_id: str | None = None
    """The provider's call id; `details["ledger_id"]` names the ledger row."""
    details: dict[str, Any]
    seq: int
    """Gap-free position in the database's one audit chain, from 1 (`bot/store/chain.py`)."""
    prev_hash: str
    hash: str


class DecisionOutcome(BaseModel):
    """What `Store.decide` did. `why` says why nothing was recorded (or, recorded, what is
    missing: `MoreApprovalsNeeded`)."""

    model_config = _FROZEN

    recorded: bool
    row: ToolCallRow
    """The row as it stands after the attempt."""
    why: DecisionReason | None = None


class RecoveredSession(BaseModel):
    """A session that `Store.recover` repaired after a crash; the bot tells its thread."""

    model_config = _FROZEN

    session: SessionRow
    interrupted: list[ToolCallRow]
    """Calls that were running when OpsGate stopped: outcome unknown, never run again."""
    not_run: list[str] = []
    """Provider call ids that were answered "Not run" so the history stays valid."""


def batch_complete(rows: list[ToolCallRow]) -> bool:
    """Whether every gated call of a batch has a decision, so the batch may resume.

    A list without gated calls is not a paused batch, so it is never complete.
    """
    gated = [row.id for row in rows if row.needs_approval]
    decided = [row.id for row in rows if row.needs_approval and row.status != "pending"]
    return bool(gated) and not undecided_calls(gated, decided)


class QueueItem(BaseModel):
    """A message waiting (or having waited) in the run queue for a free slot in its channel."""

    model_config = _FROZEN

    id: int
    """Increasing: the queue is first come, first served within a channel."""
    session_id: str
    channel_id: str
    requester: str
    """Slack user id, or the bot id (B…) of an allow-listed integration."""
    text: str
    message_ts: str | None = None
    """The Slack message that asked, for progress reactions; None when there is none."""
    state: QueueState
    history_seq: int | None = None
    """Where the run's first message lands in the history; set when the item is started, and
    kept when a crash cut its run after the message was stored (`Store.requeue_interrupted`)."""
    enqueued_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    rerun: bool = False
    """Said by the claim that started it: its message is stored already (from `history_seq`),
    so the run answers the stored history rather than adding the message again."""
    unmarked: bool = False
    """Its message went without the working mark (`Store.queue_unmarked`): nothing to remove
    when its run is cut short, and a rerun marks it afresh."""


class InboxItem(BaseModel):
    """Something Slack delivered and got a 200 for, saved before that 200 went out.

    It stays until processed (`Store.inbox_done`); recovery claims the rows left behind by a
    process that died (`Store.inbox_recover`), so nothing acknowledged is lost."""

    model_config = _FROZEN

    id: int
    kind: InboxKind
    payload: dict[str, Any]
    received_at: datetime


class EnqueueOutcome(BaseModel):
    """What `Store.enqueue` did: the new item, or None with the session that is busy."""

    model_config = _FROZEN

    item: QueueItem | None
    session: SessionRow
    waiting: QueueItem | None = None
    """When refused because the thread already has a message in the queue: that item."""


class CancelOutcome(BaseModel):
    """What `Store.cancel_batch` did. `rows` are the batch's rows after the attempt."""

    model_config = _FROZEN

    cancelled: bool
    rows: list[ToolCallRow]
    why: CancelReason | None = None
    """Why nothing was cancelled (the run resumed first, or the card is from an older batch)."""


class PendingApproval(BaseModel):
    """A gated call still waiting for decisions, with the session (channel, thread) it is in."""

    model_config = _FROZEN

    call: ToolCallRow
    session: SessionRow


class AllowanceRow(BaseModel):
    """A time-boxed allowance: calls of `tool` in `channel_id` whose shape matches run without a
    card until `expires_at` (`bot.allowances` decides what matches; the store keeps `shape`
    as the JSON it was given)."""

    model_config = _FROZEN

    id: str
    channel_id: str
    tool: str
    shape: str
    """JSON: what a call must look like to run under this allowance."""
    label: str
    """The shape in words, as the granter confirmed it (e.g. "`kubectl get …`")."""
    granted_by: str
    ledger_id: str
    """The call whose card granted it."""
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None

    def active(self, now: datetime) -> bool:
        return self.revoked_at is None and now < self.expires_at


class AllowanceGrant(BaseModel):
    """The allowance an "Allow for" click asks for, stored with the approval
    (`Store.allow_call`): `shape` is JSON, `label` the shape in words."""

    model_config = _FROZEN

    channel_id: str
    tool: str
    shape: str
    label: str
    expires_at: datetime


class AllowOutcome(BaseModel):
    """What `Store.allow_call` did: the decision, and the allowance when the call is approved
    by it (None otherwise: nothing of the allowance was written)."""

    model_config = _FROZEN

    decision: DecisionOutcome
    allowance: AllowanceRow | None = None


class HomeViewer(BaseModel):
    """Someone who opened the Home tab lately, from workspace `team_id`."""

    model_config = _FROZEN

    user_id: str
    team_id: str | None = None


class AssistantThread(BaseModel):
    """A conversation in Slack's AI-app container (a DM thread): the channel its user looks
    at (None: none the bot acts in), the channel its last run started with, and when its first
    request named it (None: not yet)."""

    model_config = _FROZEN

    team_id: str
    channel_id: str
    thread_ts: str
    viewing_channel: str | None = None
    run_channel: str | None = None
    titled_at: datetime | None = None
    updated_at: datetime
