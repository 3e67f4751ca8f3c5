"""`Store`: the one interface of the bot's durable state, whichever database holds it.

The docstrings here are the contract (what is conditional, what is audited); the contract tests
in `tests/store/contract/` run against every backend. Rows are the backend-neutral models of
`bot.store.models`; errors are `bot.store.errors` (never a driver's exception). A "conditional"
write is a compare-and-set: of any number of concurrent callers (tasks, processes or replicas)
exactly one wins, and the others get False or a refusal, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Literal, Protocol, Self, runtime_checkable

from agent_core.approvals import ToolApprovalResponse
from agent_core.events import ToolApprovalRequest, ToolCallHeld
from agent_core.messages import ChatMessage, ToolCall
from agent_core.sessions import StoredContext, Summary

from .chain import AuditEntry, RecordedHead
from .delegations import Delegation
from .feedback import Vote, VoteValue
from .freezes import BreakGlassRow, FreezeRow, GlassUse
from .ladder import Claimed, LadderClaim
from .mcp_pins import ListedTool, McpPin
from .models import (
    AllowanceGrant,
    AllowanceRow,
    AllowOutcome,
    AssistantThread,
    AuditRow,
    CancelOutcome,
    DecisionOutcome,
    EnqueueOutcome,
    HomeViewer,
    InboxItem,
    PendingApproval,
    QueueItem,
    RecoveredSession,
    SessionRow,
    StoredPreview,
    ToolCallRow,
)
from .outbox import OutboxEntry, OutboxRow, OutboxStats
from .plane import PlaneRequest
from .queue_notices import QueueNotice
from .quorum import Quorum
from .recorded import RecordedCall
from .states import CardLock, InboxKind
from .timelines import StoredTimeline

__all__ = ["Store"]


@runtime_checkable
class Store(Protocol):
    """The bot's durable state: sessions, history, the tool-call ledger, the queue, the audit log.

    An async context manager: entering connects (and migrates), leaving disconnects. It is an
    `agent_core.SessionStore`. It never imports a Slack library and stores user ids plain; text
    for people names them with the `person` callable given to the backend's constructor.
    """

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def abort(self) -> None:
        """Drop the connections now, without waiting on the database (a stop while it does
        not answer); the store is closed after it."""
        ...

    # -- sessions and run states ---------------------------------------------------------------

    async def get_or_create_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow:
        """The session of a Slack thread, created `idle` on first use; concurrent callers from
        any number of stores get the same one."""

    async def get_session(self, session_id: str) -> SessionRow | None: ...

    async def find_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow | None: ...

    async def set_requester(self, session_id: str, user_id: str) -> None:
        """Who asked for the current run; the actor of its approval requests. `UnknownSession`
        for an unknown id."""

    async def begin_run(self, session_id: str) -> bool:
        """idle|failed -> running, conditional; clears the error. `UnknownSession` for an
        unknown id (not a lost race)."""

    async def end_run(
        self, session_id: str, *, failed: bool = False, error: str | None = None
    ) -> bool:
        """running -> idle (or failed, recording `error`), conditional: a run that paused or
        was cancelled meanwhile is left alone (False). `error` without `failed` is a
        `ValueError`."""

    async def stop_run(
        self, session_id: str, *, why: str, by: str | None = None
    ) -> RecoveredSession | None:
        """running|resuming -> idle for a run this process stopped (cancelled, or past its
        deadline), conditional: None if the session was not going. Exactly as recovery after a
        crash: `executing` calls become `interrupted` (never run again), the batch's other
        open calls are answered "Not run" (`close_batch`); audited as `run_stopped`."""

    async def claim_resume(self, session_id: str) -> bool:
        """awaiting_approval -> resuming, conditional: of concurrent claimers (the last click,
        the start-up sweep, another replica) exactly one resumes the run."""

    async def resume_started(self, session_id: str) -> None:
        """resuming -> running, by the claimer once it has the decisions; `InvalidTransition`
        if the session is not resuming."""

    # -- history and execution (agent_core.SessionStore) ---------------------------------------

    async def load_messages(self, session_id: str) -> list[ChatMessage]:
        """The whole history, oldest first (empty for an unknown session)."""

    async def message_at(self, session_id: str, seq: int) -> ChatMessage | None:
        """One message of the history by its position (a call's `message_seq`: the assistant
        turn that asked for it, whose text a card shows as the model's reason); None when
        there is none."""

    async def append_messages(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        """Append in one transaction (nothing for an empty list); `UnknownSession` writes
        nothing."""

    async def load_context(self, session_id: str) -> StoredContext:
        """The latest compaction summary and the messages after it, read in one snapshot: what
        a run loads, so a turn's cost does not grow with the thread (empty for an unknown
        session)."""

    async def save_summary(self, session_id: str, summary: Summary) -> bool:
        """Store a summary of the first `summary.upto` messages, append-only. Conditional:
        False if a stored summary already reaches as far (of racing runs, one wins). A summary
        reaching past the stored messages is a `StoreError`; `UnknownSession` for an unknown
        id. The messages it stands for stay stored."""

    async def record_pause(
        self,
        session_id: str,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None:
        """In one transaction: the assistant message, a `pending` ledger row per call (gated or
        held), a new batch, the pause transition (-> awaiting_approval) and a "request" audit
        row per gated call. A request naming a call the message lacks, or a message repeating a
        call id, is a `StoreError` that writes nothing."""

    async def start_tool_call(self, session_id: str, call: ToolCall) -> None:
        """Mark the call of the latest tool-call message `executing` and commit before it runs.

        Conditional: allowed from `approved`, or `pending` for a held call; a call of a round
        that did not pause gets its row here. Otherwise `ToolCallAlreadyStarted` (audited as a
        "refusal"): a call never runs twice. Audited "execution_start"."""

    async def finish_tool_call(
        self, session_id: str, call: ToolCall, message: ChatMessage, *, is_error: bool
    ) -> None:
        """In one transaction: the `executing` call `done` with its result, and its tool message
        appended; audited "execution_end". A call not executing is a `StoreError`. With
        redraws owed, a carded call's redraw commits with its result (the card says "ran")."""

    # -- the ledger ------------------------------------------------------------------------------

    async def get_call(self, ledger_id: str) -> ToolCallRow | None: ...

    async def find_call(self, session_id: str, call_id: str) -> ToolCallRow | None:
        """The latest ledger row for a provider call id in a session (ids may repeat later)."""

    async def batch_calls(self, session_id: str) -> list[ToolCallRow]:
        """The rows of the session's latest paused batch, in the model's order."""

    async def set_card(
        self, ledger_id: str, channel: str, ts: str, *, locked: CardLock | None = None
    ) -> None:
        """Where the call's card was posted, and why it may not be approved (`locked`, None:
        it may). `UnknownCall` for an unknown id."""

    async def card_drawn(self, ledger_id: str, drawn: str) -> None:
        """The card now shows `drawn` (`card_state` of the row it was drawn from)."""

    async def stale_cards(self) -> list[ToolCallRow]:
        """Posted cards that still show buttons (or old progress) for a call that has moved on,
        e.g. after a crash between a cancel and the redraw: start-up redraws them."""

    async def set_expiry(
        self, ledger_id: str, expires_at: datetime, *, ttl: str | None = None
    ) -> None:
        """When an undecided gated call expires; `ttl` in words defaults to the time left now,
        rounded. `UnknownCall` for an unknown id."""

    async def decide(
        self,
        ledger_id: str,
        decision: Literal["approved", "rejected"],
        *,
        user_id: str,
        team_id: str | None = None,
        reason: str | None = None,
        required_approvals: int = 1,
        rule: str | None = None,
        policy_rule: str | None = None,
        policy_match: str | None = None,
        digest: str | None = None,
        preview_digest: str | None = None,
        requirements: Sequence[Quorum] | None = None,
        counts_for: Sequence[str] | None = None,
        delegate: str | None = None,
    ) -> DecisionOutcome:
        """Record a decision if the call is still pending: conditional, first writer wins.
        `delegate`: who clicked for `user_id` (a delegation; the audit's actor, with
        `acting_for`).

        `requirements`: every requirement the call must meet at once (None: one, of
        `required_approvals`); `counts_for`: the keys of those the decider's approval counts
        toward (None: the first). They are stored with the call (`ToolCallRow.quorum`), and
        the call is approved, in this transaction, once each requirement has its distinct
        approvers (`bot.store.quorum`); `MoreApprovalsNeeded.missing` says what is not met.

        `digest` is what the decider's card showed: if the pending call now runs other
        arguments (edited since), nothing is recorded (`ArgumentsChanged`); `preview_digest`
        likewise for its preview's output (`PreviewChanged`: run again since, and changed). An
        approval adds `user_id` to the distinct approvers and approves the call once there are
        `required_approvals`; one rejection rejects it. A call past its expiry is expired
        here instead (audited "expiry"). Audited "decision" or "refusal" (with `rule`, who may
        decide, `policy_rule`, the policy rule `tools.<tool>.rules[<i>]` that gated it, and
        `policy_match`, what that rule matches: its prefix and pattern in words). `why` tells
        a loser who won and when, or how many approvals are missing."""

    async def set_preview(
        self,
        ledger_id: str,
        preview: StoredPreview,
        *,
        why: str,
        actor: str | None = None,
        reset_approvals: bool = False,
    ) -> ToolCallRow | None:
        """Store a run of the call's preview and audit it ("preview": digest, exit status,
        duration, `why` it ran); `reset_approvals` drops the approvals so far (they were
        given on another preview). None when the call is no longer pending (nothing stored).
        With redraws owed (`owe_card_redraws`), the card's redraw commits with it."""

    async def expire_due(self, now: datetime | None = None) -> list[ToolCallRow]:
        """Expire every undecided gated call whose time is up (audited "expiry" each)."""

    async def due_reminders(
        self, before: timedelta, now: datetime | None = None
    ) -> list[ToolCallRow]:
        """Undecided gated calls expiring within `before`, not reminded of yet; marks them
        (audited "reminder"), so each reminder goes out once across all stores."""

    async def next_expiry(self) -> datetime | None:
        """When the next undecided gated call expires (a sweeper's sleep)."""

    async def delegate(
        self, delegator: str, delegate: str, until: datetime, reason: str | None
    ) -> None:
        """`delegate` decides for `delegator` until `until`, replacing an earlier delegation
        of `delegator` (audited "delegated")."""

    async def end_delegation(self, delegator: str, why: str = "ended") -> bool:
        """End `delegator`'s delegation now (audited "delegation_ended"); False: none."""

    async def end_lapsed_delegations(self, now: datetime) -> int:
        """End the delegations whose time passed, each audited once across all stores."""

    async def delegations(self, now: datetime) -> list[Delegation]:
        """The delegations in force at `now`."""

    async def calls_since(self, since: datetime) -> list[ToolCallRow]:
        """Every ledger row created at or after `since`, oldest first (`opsgate report`)."""

    async def waiting_calls(self, limit: int = 10_000) -> list[ToolCallRow]:
        """Undecided gated calls whose card was posted, oldest first (`bot.store.ladder`)."""

    async def claim_escalation(
        self,
        row: ToolCallRow,
        step: int,
        details: Mapping[str, Any],
        owed: Sequence[OutboxEntry] = (),
    ) -> bool:
        """Conditional: move the call's `escalation_step` from what `row` shows to `step`,
        audited "escalated" (`details`), with `owed` outbox rows and its card's redraw; False
        when another process did it first or the call is decided."""

    async def claim_reminder(
        self,
        row: ToolCallRow,
        count: int,
        details: Mapping[str, Any],
        owed: Sequence[OutboxEntry] = (),
    ) -> bool:
        """Conditional: move the call's `reminders_sent` from what `row` shows to `count`,
        audited "reminded" (`details`), with `owed` outbox rows; False as above."""

    async def claim_all(self, claims: Sequence[LadderClaim], *, wake: bool = True) -> list[Claimed]:
        """Each claim (a step or a reminder round) as the two above, in order, in one
        transaction; which were made, and the calls a step approved (its `needs` met by the
        approvals already given). `wake`: wake the outbox's sender afterwards."""

    async def responses_for_batch(self, session_id: str) -> list[ToolApprovalResponse]:
        """The decisions of the latest batch's gated calls, as the resume needs them; deciders
        named by the store's `person`."""

    async def pending_approvals(self) -> list[PendingApproval]:
        """Every gated call still undecided in a paused run, oldest first, with its session."""

    async def sessions_awaiting_approval(self) -> list[SessionRow]:
        """Paused sessions; at start-up the bot resumes those already decided."""

    async def cancel_batch(
        self,
        session_id: str,
        *,
        user_id: str,
        batch_id: str | None = None,
        team_id: str | None = None,
        via: str = "message",
        rule: str | None = None,
    ) -> CancelOutcome:
        """End a paused run without running anything of its batch, in one transaction.

        Conditional (awaiting_approval -> idle): of a cancel racing the resume claim or another
        cancel, one wins. Pending and approved calls become `cancelled`; the batch is closed
        (`agent_core.batches.close_batch`) with each call's outcome. With `batch_id`, applies
        only to that batch. Audited "cancel" per call, or one "refusal"."""

    async def edit_call(
        self,
        ledger_id: str,
        arguments: str,
        digest: str,
        *,
        user_id: str,
        team_id: str | None = None,
        required_approvals: int = 1,
        rule: str | None = None,
        policy_rule: str | None = None,
        policy_match: str | None = None,
        approve: bool = True,
        requirements: Sequence[Quorum] | None = None,
        counts_for: Sequence[str] | None = None,
    ) -> DecisionOutcome:
        """Approve a pending call with the arguments `user_id` changed it to (canonical JSON,
        and their `digest`): conditional like `decide` (an edit racing an approval has one
        winner). The edited call is a new one: earlier approvals are dropped and the editor's is
        its first (`approve=False`: none is, when the edited call has a preview nobody has seen
        yet). `arguments` keeps the model's own. Audited "edited" (both versions, `rule` and
        `policy_rule` as on every decision row)."""

    async def create_allowance(
        self,
        *,
        channel_id: str,
        tool: str,
        shape: str,
        label: str,
        granted_by: str,
        ledger_id: str,
        expires_at: datetime,
    ) -> AllowanceRow:
        """A new allowance (`shape` is JSON); audited "allowance"."""

    async def allow_call(
        self,
        ledger_id: str,
        grant: AllowanceGrant,
        *,
        user_id: str,
        team_id: str | None = None,
        reason: str | None = None,
        rule: str | None = None,
        policy_rule: str | None = None,
        policy_match: str | None = None,
        digest: str | None = None,
    ) -> AllowOutcome:
        """ "Allow for": approve the call (one approval, as `decide` with `digest`) and, if that
        approves it, create the allowance `grant` granted by `user_id`, in one transaction: a
        crash leaves both or neither. Audited "decision" and "allowance"."""

    async def get_allowance(self, allowance_id: str) -> AllowanceRow | None: ...

    async def active_allowances(
        self, *, channel_id: str | None = None, now: datetime | None = None
    ) -> list[AllowanceRow]:
        """Allowances not revoked and not yet expired at `now`, oldest first."""

    async def revoke_allowance(self, allowance_id: str, *, user_id: str) -> bool:
        """End an allowance now; conditional (False if already revoked or unknown)."""

    async def recorded_calls(self, *, since: datetime) -> list[RecordedCall]:
        """The ledger's calls created at or after `since`, oldest first, with their channel
        and requester (for `opsgate policy replay`; reads only)."""

    async def allowances_since(self, since: datetime) -> list[AllowanceRow]:
        """Every allowance in force at some moment after `since`, revoked ones included."""

    # -- pinned MCP tool definitions (`bot/store/mcp_pins.py`) ---------------------------------

    async def pin_tools(
        self,
        server: str,
        listed: Sequence[ListedTool],
        *,
        changes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[McpPin]:
        """Pin first sightings, quarantine changed definitions (audited); every listed pin."""

    async def accept_tool_definition(
        self, server: str, tool: str, digest: str, *, user_id: str
    ) -> bool:
        """Pin a quarantined tool's listed definition `digest`; conditional, audited."""

    async def mcp_pins(self) -> list[McpPin]: ...

    # -- change freezes and break-glass (`bot/store/freezes.py`) ---------------------------------

    async def start_freeze(
        self, *, channel_id: str, started_by: str, reason: str, ends_at: datetime
    ) -> FreezeRow:
        """A new ad hoc freeze of the channel, from now until `ends_at`."""

    async def end_freezes(self, *, channel_id: str, ended_by: str) -> list[FreezeRow]:
        """End the channel's ad hoc freezes in force now; conditional (each ends once)."""

    async def ad_hoc_freezes(
        self, *, ending_after: datetime, channel_id: str | None = None
    ) -> list[FreezeRow]:
        """Ad hoc freezes that end after `ending_after` (of one channel, when given)."""

    async def claim_freeze_notice(
        self,
        key: str,
        event: str,
        *,
        details: Mapping[str, Any],
        after: str | None = None,
    ) -> bool:
        """Claim announcement `key` and audit `event`, in one transaction; conditional (one
        caller across replicas gets True). `after`: only once that key was claimed."""

    async def record_break_glass(
        self,
        ledger_id: str,
        *,
        channel_id: str,
        user_id: str,
        reason: str,
        freeze: str,
        session_id: str | None,
        call_id: str | None,
        details: Mapping[str, Any],
    ) -> bool:
        """Record a break-glass use and audit `break_glass`; conditional (once per call)."""

    async def break_glass(
        self,
        ledger_id: str,
        use: GlassUse,
        *,
        team_id: str | None = None,
        required_approvals: int = 1,
        rule: str | None = None,
        policy_rule: str | None = None,
        policy_match: str | None = None,
        digest: str | None = None,
        notices: Sequence[OutboxEntry] = (),
    ) -> DecisionOutcome:
        """Approve a frozen call by breaking glass: the approval (`decide`, reason "break
        glass: <reason>"), `record_break_glass` when it is recorded, the card's redraw (when
        owed) and, when recorded, the outbox rows `notices` (the loud notice) in one
        transaction: all of them or none."""

    async def break_glass_of(self, ledger_id: str) -> BreakGlassRow | None: ...

    async def review_break_glass(self, ledger_id: str, *, user_id: str) -> BreakGlassRow | None:
        """Mark a break-glass use reviewed (never by its breaker), audit
        `break_glass_reviewed`; conditional (None when reviewed already). The card's redraw
        (when owed) commits with it."""

    async def unreviewed_break_glass(self) -> list[BreakGlassRow]: ...

    # -- the Home tab ----------------------------------------------------------------------------

    async def home_opened(self, user_id: str, team_id: str | None = None) -> None:
        """Remember that `user_id` opened the Home tab now; only the `HOME_VIEWERS_KEPT` most
        recent are kept."""

    async def home_viewers(self) -> list[HomeViewer]:
        """Who opened the Home tab lately, most recent first."""

    # -- the run queue -------------------------------------------------------------------------

    async def enqueue(
        self, session_id: str, *, requester: str, text: str, message_ts: str | None = None
    ) -> EnqueueOutcome:
        """Queue a message unless its session is busy (run active or paused, or a message
        already queued); checked and written in one transaction."""

    async def claim_queued(self, channel_id: str, *, limit: int) -> QueueItem | None:
        """Start the channel's oldest queued item if fewer than `limit` of its sessions are
        running or resuming: conditional, in one transaction with the session's idle|failed ->
        running (requester set). Never exceeds the limit or starts an item twice."""

    async def release_queued(self, item_id: int) -> None:
        """Undo `claim_queued` for a run that could not start (shutting down)."""

    async def finish_queued(self, item_id: int) -> None:
        """The item's run ended (answered, failed or paused)."""

    async def cancel_queued(self, session_id: str, *, user_id: str) -> QueueItem | None:
        """Withdraw the thread's queued message (audited "cancel"); None if none waits."""

    async def queued_item(self, session_id: str) -> QueueItem | None: ...

    async def queue_position(self, item_id: int) -> int | None:
        """How many of the channel's items are queued ahead; None if no longer queued."""

    async def queue_items(
        self, *, channel_id: str | None = None, states: Collection[str] | None = None
    ) -> list[QueueItem]: ...

    async def queued_channels(self) -> list[str]:
        """Channels with messages waiting, the longest-waiting first."""

    async def requeue_interrupted(self) -> list[QueueItem]:
        """At start-up, before `recover`: started items whose run stored nothing go back to the
        queue (their sessions to idle), and so do those whose run `runs_again` (stored its
        message, no call reached `executing`), keeping `history_seq`: the claim that starts
        one says `rerun`. The others are marked done (`recover` tells their threads)."""

    # -- audit and event dedupe ----------------------------------------------------------------

    async def audit(
        self,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one row to the audit log, which is append-only and chained: the row gets
        the next `seq` and its `hash` (`bot/store/chain.py`), in the caller's transaction."""

    async def audit_rows(
        self,
        *,
        since: datetime | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[AuditRow]:
        """Audit rows in the order written, from `since` on if given, past `after_seq` (the
        follower's and the exporter's cursor), at most `limit`. A row that cannot be read
        (edited by hand) raises `StoreError` naming its seq."""

    async def audit_entries(
        self,
        *,
        since: datetime | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[AuditEntry]:
        """As `audit_rows`, but a row that cannot be read is listed as `Unreadable` (its id,
        its seq if that can be read, and why), so readers print and verify the others."""

    async def audit_chain_head(self) -> tuple[int, str]:
        """The seq and hash the chain head records (0 and 64 zeros for an empty log)."""

    async def vote(self, session_id: str, message_ts: str, *, user: str, value: VoteValue) -> Vote:
        """Record `user`'s feedback vote on an answer: one per person per answer, the latest
        counts; audited (`feedback`) only when the vote changed."""

    async def votes(self, session_id: str, message_ts: str) -> dict[str, VoteValue]:
        """Each person's vote on the answer, as it stands."""

    async def keep_timeline(self, session_id: str, ts: str, shown: str) -> None:
        """The paused run's timeline is message `ts`, showing `shown` (replaces what was kept)."""

    async def kept_timeline(self, session_id: str) -> StoredTimeline | None:
        """The paused run's timeline message, for its resume to edit; None if none was kept."""

    async def drop_timeline(self, session_id: str) -> None:
        """The run ended: its timeline message is no longer continued."""

    async def audit_head(self) -> RecordedHead:
        """The chain head as recorded: seq, hash and the key fingerprint (None: not keyed)."""

    async def note_trace(self, session_id: str, trace_id: str, span_id: str) -> None:
        """Store the paused run's span ids with the calls of the session's current batch."""

    async def claim_audit_export(self, holder: str, lease: timedelta) -> int | None:
        """Hold (or renew) the audit export for `lease`, so one process delivers at a time;
        the last delivered seq, or None while another holder's lease runs."""

    async def audit_exported(self, holder: str, seq: int) -> bool:
        """Move the export cursor forward to `seq`; False if `holder` no longer holds it."""

    async def release_audit_export(self, holder: str) -> None:
        """Give the export up (shutdown), so another replica takes it at once."""

    async def first_sighting(self, event_id: str) -> bool:
        """True the first time an event id is seen, across all stores; forgets after
        `SEEN_EVENT_TTL`."""

    async def probe_write(self) -> None:
        """Write (and overwrite) one probe row: `/readyz` asks whether the database accepts
        writes. Raises `StoreError` (or the driver's error) when it does not."""

    # -- the inbox: what Slack was told we have (docs/architecture.md) ----------------------

    async def inbox_add(
        self, kind: InboxKind, payload: Mapping[str, Any], *, keys: Sequence[str] = ()
    ) -> int | None:
        """Save a delivery before it is acknowledged, owned by this store (its replica).

        `keys` are dedupe keys (event id, channel and ts): in the same transaction each is
        claimed as `first_sighting` does, and if any was seen before nothing is saved and the
        answer is None. A crash therefore never leaves a key claimed with nothing saved.
        Returns the row's id."""

    async def inbox_done(self, item_id: int) -> None:
        """The row was processed (its run queued, or it was answered); it is not recovered."""

    async def inbox_recover(self) -> list[InboxItem]:
        """At start-up: claim the unprocessed rows of processes that are gone (SQLite: every
        one, the file being exclusive; PostgreSQL: those of instances whose lease lapsed),
        oldest first. Conditional: each row is claimed by one store, however many recover."""

    # -- crash recovery --------------------------------------------------------------------------

    async def recover(self) -> list[RecoveredSession]:
        """Once at start-up: `executing` calls become `interrupted` (never run again), their
        batches are closed (interrupted / not run), and sessions left running or resuming
        become idle; paused sessions are left alone. Audited "interrupted"."""

    # -- the models' context windows (learned from providers' refusals) ----------------------

    async def context_window(self, model: str) -> int | None:
        """The context window learned for `model`, in tokens; None if none was learned."""

    async def remember_context_window(self, model: str, tokens: int) -> None:
        """Remember `model`'s context window (tokens > 0) for every process and replica;
        the last writer wins."""

    # -- the outbox of Slack writes (`bot.store.outbox`) ----------------------------------------

    async def put_outbox(self, entries: Sequence[OutboxEntry]) -> list[str]:
        """Store writes owed to Slack, before they are tried (one transaction). A row with a
        `key` deletes the unclaimed rows of that key (the newest is sent); one that `cancels`
        and found such a row is not stored. Returns the ids stored."""

    async def claim_outbox(self, claimer: str, *, limit: int, lease: timedelta) -> list[OutboxRow]:
        """Conditional: up to `limit` due rows nobody holds (or whose lease lapsed), best
        priority then oldest first, held by `claimer` for `lease`; one row per key at a time.
        Each row is claimed by one caller, however many claim (replicas: SKIP LOCKED)."""

    async def hold_outbox(self, entry: OutboxEntry, claimer: str, lease: timedelta) -> str:
        """Store a write its own process is making now, already held by `claimer` for `lease`:
        no sender takes it unless that process dies (then as any claimed row). Its id."""

    async def outbox_sent(self, row_id: str) -> None:
        """The row is done (Slack applied it, or refused it for good): deleted."""

    async def outbox_later(self, row_id: str, not_before: datetime, error: str) -> None:
        """Release a claimed row, due again at `not_before`."""

    async def outbox_stats(self) -> OutboxStats:
        """Rows waiting per priority and when the oldest was stored."""

    async def renew_outbox(self, claimer: str, row_ids: Sequence[str], lease: timedelta) -> None:
        """Extend `claimer`'s hold on rows it is still sending (rows it no longer holds are
        left alone)."""

    async def release_outbox(self, claimer: str) -> int:
        """Release every row `claimer` holds (a restarted sender taking its name again)."""

    async def outbox_superseded(self, row_id: str) -> bool:
        """Whether a newer row of the claimed row's key was put: then the row is deleted,
        unsent (its tries handed on to the newer row)."""

    async def outbox_next_due(self) -> datetime | None:
        """When the next row nobody holds falls due (a settling row); None when none is still
        to fall due."""

    # -- each channel's queued notice (`bot.store.queue_notices`) ---------------------------------

    async def owe_queue_notice(self, channel_id: str, *, concurrency: int | None = None) -> bool:
        """Owe the outbox a `QUEUE_NOTICE` drawing of the channel's notice (key
        `queue:<channel>`), in one transaction with opening its burst (`concurrency`: a
        message was queued). Without it only an open burst is drawn: False when none is."""

    async def queue_notice(self, channel_id: str) -> QueueNotice | None:
        """The channel's open burst: its message (ts, None until posted) and what it shows."""

    async def queue_notice_shown(self, channel_id: str, *, ts: str, shown: str) -> None:
        """The notice's message `ts` now shows `shown` (any replica edits that one)."""

    async def lost_queue_notice(self, channel_id: str, *, ts: str) -> bool:
        """The notice's message `ts` was deleted: forget it and owe a drawing (one
        transaction), which posts a new one. False when the notice is another message now."""

    async def end_queue_notice(self, channel_id: str, *, asks: int, ts: str | None) -> None:
        """The burst drawn at `asks` ended; if another message was queued since, the burst
        goes on without a message (the next drawing posts a new one)."""

    def owe_card_redraws(self, wake: Callable[[], None] | None) -> None:
        """From now on, every change a card shows (a decision or an approval of N, an edit,
        "Allow for", an expiry, a cancel, the call's result) writes a `CARD_REDRAW` row (key
        `card:<ledger id>`) for the call's card, when it has one, in the change's transaction;
        `wake` is called after the commit. A rollback leaves neither the change nor the row."""

    @property
    def card_redraws(self) -> bool:
        """Whether `owe_card_redraws` was called (the run service need not redraw after a
        change: the outbox sends the redraw the store wrote)."""

    # -- conversations in Slack's AI-app container ----------------------------------------------

    async def note_assistant_thread(
        self, team_id: str, channel_id: str, thread_ts: str, *, viewing: str | None
    ) -> None:
        """The conversation (a DM thread) is in the AI-app container and its user now looks at
        `viewing` (None: at no channel that counts); created on first use, the last writer
        wins. Seen by every store on the database, and after a restart."""

    async def assistant_thread(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> AssistantThread | None:
        """The container conversation of that thread; None for a thread outside it."""

    async def pin_assistant_run(
        self, team_id: str, channel_id: str, thread_ts: str, *, run_channel: str
    ) -> bool:
        """A run of the conversation starts with `run_channel`'s policy (its resume reads it
        back). True for the first run of the conversation only, across all stores: it names
        the conversation. A thread outside the container: nothing is written, False."""

    # -- requests from outside automation (`bot.store.plane`) -----------------------------------

    async def plane_record(
        self, request: PlaneRequest, *, audit: dict[str, Any]
    ) -> tuple[PlaneRequest, bool]:
        """Record an outside request under a new id and audit `plane_request`, in one
        transaction; a request repeating its client's idempotency key gets the first, False."""

    async def plane_record_many(
        self, requests: Sequence[tuple[PlaneRequest, dict[str, Any]]]
    ) -> list[tuple[PlaneRequest, bool]]:
        """`plane_record` of each, in order, in one transaction."""

    async def plane_attach(self, request_id: str, session_id: str) -> None:
        """The request's session (its one-call paused batch), before the batch is recorded."""

    async def plane_unopened(self, older_than: timedelta) -> list[PlaneRequest]:
        """Pending requests whose opening began over `older_than` ago and has no ledger row."""

    async def plane_claim_opening(self, request: PlaneRequest, older_than: timedelta) -> bool:
        """Conditional: one caller reopens a request `plane_unopened` returned."""

    async def plane_request(self, request_id: str) -> PlaneRequest | None:
        """The outside request with that id, if any."""

    async def plane_of_session(self, session_id: str) -> PlaneRequest | None:
        """The outside request a session holds; None for an agent's own session."""

    async def plane_signing_key(self, make: Callable[[], str]) -> str:
        """The receipts' signing key (PEM), made by `make` once for the whole database."""
