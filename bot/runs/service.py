"""`RunService`: one agent run's whole life, whatever front end it is shown on.

Intake (a message, `/opsgate <request>`), the run queue, start, streaming, the pause with
approval cards, decisions, resume, expiry and reminders, recovery after a restart, cancel, and
the answers to "what is pending for me?" and "help". It writes only to a `ThreadOutput`
(`bot.runs.output`), asks `bot.approvals` who may do what, and changes session state only
through the store's named transitions (see `docs/architecture.md`, "Run states").

Every step that must survive a restart is written to the store before the thread is told about
it, and every step that must happen once is claimed with a conditional update in the store.
Runs start only through the run queue (`bot.runs.queue`), which keeps each channel under its
`concurrency`; resumes after a decision start at once (a human is waiting for them).
"""

from __future__ import annotations

import logging
import re
from typing import Literal

from agent_core import ToolApprovalResponse

from .._faults import checkpoint
from .._words import count
from ..channels import run_options, session_for
from ..store import (
    EnqueueOutcome,
    QueueItem,
    SessionRow,
    batch_complete,
)
from ._allow import Allowances
from ._answers import Answers
from ._cancel import Cancels
from ._cards import Cards
from ._context import RunContext
from ._decisions import Decisions
from ._drive import Driver
from ._edit import Edits
from ._home import Home
from ._observe import note_decision, note_run_ended
from ._reminders import send_reminders
from .cards import PendingEntry
from .inbox import Inbox
from .notices import (
    AwaitingDecision,
    ChannelNotAllowed,
    EarlierQueued,
    Help,
    Notice,
    PendingList,
    Queued,
    Recovered,
    RootPostFailed,
    StillWorking,
)
from .output import PostFailed, Thread
from .queue import Dispatcher

__all__ = ["RunService"]

logger = logging.getLogger("opsgate.runs")

_CANCEL = re.compile(r"\s*cancel\s*[.!]?\s*", re.IGNORECASE)


class RunService:
    """The bot's behaviour, independent of Slack: see the module docstring."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cards = Cards(ctx)
        self.dispatcher = Dispatcher(ctx.store, ctx.policy, self._start_queued)
        self._driver = Driver(ctx, self.cards, self._run_ended, self.maybe_resume)
        self._cancels = Cancels(ctx, self.cards)
        self._answers = Answers(ctx, self.cards)
        self.allowances = Allowances(ctx)
        """Allowances: grant, the per-run gate, list and revoke."""
        self.decisions = Decisions(ctx, self.cards, self.maybe_resume)
        """Approve and Reject: who may, record once, redraw, resume."""
        self.edits = Edits(ctx, self.cards, self.allowances, self.decide, self.maybe_resume)
        """"Edit" and "Allow for <duration>" on a card."""
        self.home = Home(ctx, self.cards, self.allowances)
        """What a person's Home tab shows."""
        self.inbox = Inbox(ctx, on_message=self.on_message, on_slash=self.slash_request)
        """Deliveries saved before their 200, processed from the saved row."""

    # -- intake ---------------------------------------------------------------------------------

    async def owns_thread(self, thread: Thread) -> bool:
        """Whether the thread is a session of ours (replies elsewhere are not for us)."""
        found = await self.ctx.store.find_session(
            thread.team_id, thread.channel_id, thread.thread_ts
        )
        return found is not None

    async def on_message(
        self, thread: Thread, *, user: str, text: str, message_ts: str, team: str | None = None
    ) -> None:
        """A teammate (or an allow-listed bot, `user` = its id) wrote to the bot: queue a run,
        cancel the thread's paused run, or say why not. `team` is the author's workspace (not
        the thread's, in a Slack Connect channel): `cancel` is checked exactly as the button."""
        store = self.ctx.store
        if not self.ctx.policy.allows_channel(thread.channel_id):
            await self.ctx.output.say(thread, ChannelNotAllowed(thread.channel_id))
            await store.audit(
                "refusal",
                actor=user,
                details={"channel": thread.channel_id, "rule": "defaults.channels"},
            )
            return
        if _CANCEL.fullmatch(text):
            await self._cancels.from_message(thread, user=user, team=team)
            return
        await self._enqueue(thread, user=user, text=text, message_ts=message_ts)

    async def slash_request(
        self, *, team: str, channel: str, user: str, text: str
    ) -> Notice | None:
        """`/opsgate <request>`: post the request as a thread root and queue a run in that
        thread for `user`. Returns a notice for `user` alone when that was not possible."""
        if not self.ctx.policy.allows_channel(channel):
            await self.ctx.store.audit(
                "refusal",
                actor=user,
                details={"channel": channel, "rule": "defaults.channels", "via": "slash"},
            )
            return ChannelNotAllowed(channel)
        posted = await self.ctx.output.post_root(channel, user, text)
        if isinstance(posted, PostFailed):
            return RootPostFailed(posted.error)
        thread = Thread(team, posted.channel_id, posted.thread_ts)
        await self._enqueue(thread, user=user, text=text, message_ts=thread.thread_ts)
        return None

    async def _enqueue(self, thread: Thread, *, user: str, text: str, message_ts: str) -> None:
        store = self.ctx.store
        session = await store.get_or_create_session(
            thread.team_id, thread.channel_id, thread.thread_ts
        )
        outcome = await store.enqueue(session.id, requester=user, text=text, message_ts=message_ts)
        if outcome.item is None:
            await self._busy_reply(thread, outcome)
            return
        await self._dispatch_new(thread, outcome.item)

    async def _dispatch_new(self, thread: Thread, item: QueueItem) -> None:
        """Start the new item if its channel has a free slot; otherwise say it is queued."""
        started = await self.dispatcher.kick(thread.channel_id)
        if any(s.id == item.id for s in started):
            return
        ahead = await self.ctx.store.queue_position(item.id)
        if ahead is None:  # another task's kick started it meanwhile
            return
        limit = self.ctx.policy.concurrency_for(thread.channel_id)
        await self.ctx.output.say(thread, Queued(limit, ahead))

    async def _busy_reply(self, thread: Thread, outcome: EnqueueOutcome) -> None:
        session = outcome.session
        notice: Notice
        if session.state == "awaiting_approval":
            rows = await self.ctx.store.batch_calls(session.id)
            pending = [r for r in rows if r.needs_approval and r.status == "pending"]
            notice = AwaitingDecision(tuple([await self.cards.link(r) for r in pending]))
        elif outcome.waiting is not None:
            notice = EarlierQueued()
        else:
            notice = StillWorking()
        await self.ctx.output.say(thread, notice)

    # -- running --------------------------------------------------------------------------------

    def _start_queued(self, item: QueueItem) -> None:
        """The dispatcher's `start`: the item's run, in the background."""
        self.ctx.tasks.spawn(self._run_queued(item), name=f"run {item.session_id}")

    async def _run_queued(self, item: QueueItem) -> None:
        session = await self.ctx.store.get_session(item.session_id)
        if session is None:  # cannot happen (the claim joined on it); never hold a slot
            logger.error("queued item %d names no session %r", item.id, item.session_id)
            await self.ctx.store.finish_queued(item.id)
            return
        thread = _thread(session)
        gate = self.allowances.gate(thread, session.id)
        options = run_options(
            self.ctx.policy,
            self.ctx.tools,
            session.channel_id,
            gate=gate,
            turn_timeout=self.ctx.deadlines.turn,
        )
        stream = self.ctx.agent.run(item.text, session_for(session.id, session.channel_id), options)
        await self._driver.drive(
            thread,
            session.id,
            stream,
            requester=item.requester,
            message_ts=item.message_ts,
            item_id=item.id,
        )

    async def _run_ended(self, thread: Thread, item_id: int | None) -> None:
        try:
            if item_id is not None:
                await self.ctx.store.finish_queued(item_id)
            await self.dispatcher.kick(thread.channel_id)
        except Exception:
            logger.exception("could not start the next queued run in %s", thread.channel_id)

    # -- decisions ------------------------------------------------------------------------------

    async def decide(
        self,
        ledger_id: str,
        decision: Literal["approved", "rejected"],
        *,
        user: str,
        team: str | None,
        reason: str | None = None,
        digest: str | None = None,
    ) -> Notice | None:
        """Record a decision (`bot.runs._decisions`); a notice for the decider alone when
        nothing changed. `digest`: what the clicked card showed."""
        return await self.decisions.decide(
            ledger_id, decision, user=user, team=team, reason=reason, digest=digest
        )

    async def maybe_resume(self, session_id: str) -> bool:
        """Resume the paused run once every gated call is decided; exactly one caller does."""
        store = self.ctx.store
        if self.ctx.tasks.closed:
            return False  # shutting down: the next start-up resumes it
        batch = await store.batch_calls(session_id)
        if not batch or not batch_complete(batch):
            return False
        if not await store.claim_resume(session_id):
            return False
        await checkpoint("resume_claimed")
        session = await store.get_session(session_id)
        assert session is not None
        responses = await self._responses(session_id)
        await store.resume_started(session_id)
        await checkpoint("resume_started")
        # The same tools as the run that paused: a stored call must not become "unknown".
        gate = self.allowances.gate(_thread(session), session_id)
        options = run_options(
            self.ctx.policy,
            self.ctx.tools,
            session.channel_id,
            responses,
            gate=gate,
            turn_timeout=self.ctx.deadlines.turn,
        )
        stream = self.ctx.agent.run(None, session_for(session_id, session.channel_id), options)
        # Progress shows on the first card while the approved calls run.
        card_ts = next((r.card_ts for r in batch if r.needs_approval and r.card_ts), None)
        self.ctx.tasks.spawn(
            self._driver.drive(
                _thread(session),
                session_id,
                stream,
                requester=session.requester,
                message_ts=card_ts,
            ),
            name=f"resume {session_id}",
        )
        return True

    async def _responses(self, session_id: str) -> list[ToolApprovalResponse]:
        return await self.ctx.store.responses_for_batch(session_id)

    # -- time and restarts ----------------------------------------------------------------------

    async def expire_due(self) -> int:
        """Remind about calls that expire soon; expire those past their time limit, redraw their
        cards and resume their runs."""
        store = self.ctx.store
        await send_reminders(self.ctx, self.cards)
        expired = await store.expire_due(self.ctx.clock())
        for row in expired:
            note_decision(self.ctx, row, "expired")
            await self.cards.refresh(row)
        for session_id in {row.session_id for row in expired}:
            await self.maybe_resume(session_id)
        return len(expired)

    async def recover(self) -> None:
        """After a restart: requeue runs that had not begun, tell each thread whose run was cut
        short, redraw the cards of paused runs, and start what was queued before."""
        store = self.ctx.store
        requeued = await store.requeue_interrupted()
        if requeued:
            logger.info(
                "requeued %s that had not begun before the restart", count(len(requeued), "run")
            )
        for recovered in await store.recover():
            note_run_ended(self.ctx, recovered.session.id, "interrupted")
            tools = tuple(r.tool for r in recovered.interrupted)
            await self.ctx.output.say(_thread(recovered.session), Recovered(tools))
            await self.cards.redraw_batch(recovered.session.id)
        await self.cards.repost_missing()
        await self.cards.redraw_stale()
        for session in await store.sessions_awaiting_approval():
            # A decision may be recorded with its card not yet redrawn, or its resume not
            # yet claimed: redraw, then resume what is decided.
            await self.cards.redraw_batch(session.id)
            await self.maybe_resume(session.id)
        # Last: what was saved but never processed starts runs, which the steps above must
        # not mistake for runs cut short.
        await self.inbox.recover()
        await self.dispatcher.kick_all()

    # -- cancel ---------------------------------------------------------------------------------

    async def cancel(
        self,
        session: SessionRow,
        *,
        user: str,
        team: str | None = None,
        via: Literal["message", "button"],
        batch_id: str | None = None,
    ) -> Notice | None:
        """Cancel the session's run waiting for approval. Returns a notice for `user` alone
        when nothing was cancelled (not allowed, or the run resumed first)."""
        return await self._cancels.cancel(session, user=user, team=team, via=via, batch_id=batch_id)

    async def cancel_from_card(
        self, ledger_id: str, *, user: str, team: str | None
    ) -> Notice | None:
        """A "Cancel run" click. Returns a notice for the clicker alone when nothing changed."""
        return await self._cancels.from_card(ledger_id, user=user, team=team)

    # -- answers --------------------------------------------------------------------------------

    async def pending_for(self, user: str, *, channel: str, team: str | None = None) -> PendingList:
        """The approvals `user` may decide now, each linked to its card."""
        entries: list[PendingEntry] = await self._answers.pending(user, channel=channel, team=team)
        return PendingList(tuple(entries))

    def help_for(self, channel: str) -> Help:
        """Usage, and the policy of `channel`."""
        return Help(self._answers.channel_help(channel))


def _thread(session: SessionRow) -> Thread:
    return Thread(session.team_id, session.channel_id, session.thread_ts)
