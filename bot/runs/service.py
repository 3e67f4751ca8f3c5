"""`RunService`: one agent run's whole life, whatever front end it is shown on.

Intake (a message, `/opsgate <request>`), the run queue, start, streaming, the pause with
approval cards, decisions, resume, expiry and reminders, recovery after a restart, cancel, and
the answers to "what is pending for me?" and "help". It writes only to a `ThreadOutput`
(`bot.runs.output`), asks `bot.approvals` who may do what, and changes session state only
through the store's named transitions (see `docs/architecture.md`, "Run states").

Every step that must survive a restart is written to the store before the thread is told about
it, and every step that must happen once is claimed with a conditional update in the store.
Runs start only through the run queue (`Dispatcher`, below), which keeps each channel under its
`concurrency`; resumes after a decision start at once (a human is waiting for them).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence

from ..policy import Policy, oncall_now
from ..settings import checkpoint
from ..store import (
    EnqueueOutcome,
    InboxItem,
    QueueItem,
    RecoveredSession,
    Store,
    StoreError,
    batch_complete,
)
from ..words import count
from .break_glass import FreezeDesk
from .cards import Cards
from .clicks import Clicks, Feedback
from .context import Container, RunContext, run_options, session_for
from .decisions import Cancels, Decisions
from .driver import Driver
from .edits import Allowances, Edits
from .gate import delegate_command
from .inbox import Inbox, MessageDelivery
from .ladder import climb, send_reminders
from .metrics import note_decision, note_recovered
from .notices import (
    AwaitingDecision,
    ChannelNotAllowed,
    EarlierQueued,
    Help,
    Notice,
    NotSaved,
    OnCallNow,
    PendingList,
    Queued,
    Recovered,
    RootPostFailed,
    StillWorking,
)
from .output import PostFailed, Thread
from .people import Answers, Home
from .previews import bound_options
from .tool_pins import ToolReview, review_tool
from .views import PendingEntry

__all__ = ["Dispatcher", "RunService"]


logger = logging.getLogger("opsgate.runs")

_CANCEL = re.compile(r"\s*cancel\s*[.!]?\s*", re.IGNORECASE)


class RunService:
    """The bot's behaviour, independent of Slack: see the module docstring."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cards = Cards(ctx)
        self.dispatcher = Dispatcher(ctx.store, ctx.policy, self._start_queued)
        self.allowances = Allowances(ctx)
        """Allowances: grant, the per-run gate, list and revoke."""
        self._driver = Driver(
            ctx,
            self.cards,
            self._run_ended,
            resume=self.maybe_resume,
            allowance_uses=self.allowances.uses,
        )
        self.cancels = Cancels(ctx, self.cards, self._driver.paused)
        self.feedback = Feedback(ctx)
        """Good/bad clicks under final answers: audited and counted."""
        self.container = Container(ctx)
        """Conversations in Slack's AI-app container: the channel each one looks at."""
        self.answers = Answers(ctx, self.cards)
        self.decisions = Decisions(ctx, self.cards, self.maybe_resume, self._driver.paused)
        self.freezes = FreezeDesk(ctx, self.cards, self.maybe_resume)
        """Change freezes and break-glass (`bot.runs.break_glass`)."""
        """Approve and Reject: who may, record once, redraw, resume."""
        self.edits = Edits(
            ctx, self.cards, self.allowances, self.decisions.decide, self.maybe_resume
        )
        """"Edit" and "Allow for <duration>" on a card."""
        self.home = Home(ctx, self.cards, self.allowances)
        """What a person's Home tab shows."""
        self.inbox = Inbox(ctx, on_message=self.on_message, on_slash=self.slash_request)
        """Deliveries saved before their 200, processed from the saved row."""
        clicks = Clicks(
            ctx,
            decisions=self.decisions,
            edits=self.edits,
            allowances=self.allowances,
            cancels=self.cancels,
            freezes=self.freezes,
            home=self.home,
            feedback=self.feedback,
        )
        # -- the front door: each click or event a front end forwards is one of these calls --
        # A click on a card, a Home tab or a form they opened: a `Click` in, an `Answer` out.
        self.approve = clicks.approve
        self.reject_form = clicks.reject_form
        self.reject = clicks.reject
        self.cancel_run = clicks.cancel_run
        self.rerun_preview = clicks.rerun_preview
        self.edit_form = clicks.edit_form
        self.submit_edit = clicks.submit_edit
        self.allow = clicks.allow
        self.allow_chosen = clicks.allow_chosen
        self.revoke = clicks.revoke
        self.glass_form = clicks.glass_form
        self.break_glass = clicks.break_glass
        self.review = clicks.review
        self.rate = clicks.rate
        self.explain = clicks.explain
        # The Home tab, the AI-app container, channel membership.
        self.home_opened = self.home.opened
        self.thread_started = self.container.started
        self.viewing = self.container.viewing
        self.members_changed = ctx.approvals.channels.forget
        self.active_allowances = self.allowances.active
        # Deliveries saved before their acknowledgement (`bot.runs.inbox`).
        self.save = self.inbox.save
        self.save_within = self.inbox.save_within
        self.process_soon = self.inbox.process_soon
        self.process_owned = self.inbox.process_owned
        self.done = self.inbox.done
        self.thread_of_call = self.decisions.thread_of_call

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
                details={
                    "channel": thread.channel_id,
                    "rule": "defaults.channels",
                    "policy_rule": None,
                },
            )
            return
        if _CANCEL.fullmatch(text):
            await self.cancels.from_message(thread, user=user, team=team)
            return
        if await self._outside_thread(thread):
            return  # an outside request's thread is its card's: no agent run there
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
                details={
                    "channel": channel,
                    "rule": "defaults.channels",
                    "policy_rule": None,
                    "via": "slash",
                },
            )
            return ChannelNotAllowed(channel)
        posted = await self.ctx.output.post_root(channel, user, text)
        if isinstance(posted, PostFailed):
            return RootPostFailed(posted.error)
        thread = Thread(team, posted.channel_id, posted.thread_ts)
        await self._enqueue(thread, user=user, text=text, message_ts=thread.thread_ts)
        return None

    async def _outside_thread(self, thread: Thread) -> bool:
        """Whether the thread holds a request from outside automation (`bot.plane`)."""
        store = self.ctx.store
        session = await store.find_session(thread.team_id, thread.channel_id, thread.thread_ts)
        return session is not None and await store.plane_of_session(session.id) is not None

    async def _enqueue(self, thread: Thread, *, user: str, text: str, message_ts: str) -> None:
        store = self.ctx.store
        session = await store.get_or_create_session(
            thread.team_id, thread.channel_id, thread.thread_ts
        )
        outcome = await store.enqueue(session.id, requester=user, text=text, message_ts=message_ts)
        if outcome.item is None:
            await self._busy_reply(thread, outcome)
            return
        going = outcome.session.state in ("running", "resuming")
        await self._dispatch_new(thread, outcome.item, behind=going)

    async def _dispatch_new(self, thread: Thread, item: QueueItem, *, behind: bool) -> None:
        """Start the new item if its channel has a free slot; otherwise say it is queued:
        `behind` the thread's run going (it starts when that run ends, whose kick sees it, or
        this one's if the run ended meanwhile), or behind the channel's other runs."""
        started = await self.dispatcher.kick(thread.channel_id)
        if any(s.id == item.id for s in started):
            return
        ahead = await self.ctx.store.queue_position(item.id)
        if ahead is None:  # another task's kick started it meanwhile
            return
        if behind:
            await self.ctx.output.say(thread, StillWorking())
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
        else:
            notice = EarlierQueued()
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
        thread = Thread.of(session)
        gate = self.allowances.gate(thread, session.id)
        start = await self.container.run_start(thread)
        channel = start.channel
        if start.first:
            await self.ctx.output.title(thread, item.text)
        options = run_options(
            self.ctx.policy,
            self.ctx.tools,
            channel,
            gate=gate,
            turn_timeout=self.ctx.deadlines.turn,
        )
        agent_session = session_for(session.id, channel)
        if item.rerun:  # cut by a crash after its message was stored: answer what is stored
            stream = self.ctx.agent.run_again(agent_session, options)
        else:
            stream = self.ctx.agent.run(item.text, agent_session, options)
        await self._driver.drive(
            thread,
            session.id,
            stream,
            requester=item.requester,
            message_ts=item.message_ts,
            item_id=item.id,
            marked=item.rerun and not item.unmarked,
            unmarked=item.unmarked,
        )

    async def _run_ended(self, thread: Thread, item_id: int | None) -> None:
        try:
            if item_id is not None:
                await self.ctx.store.finish_queued(item_id)
            await self.dispatcher.kick(thread.channel_id)
        except Exception:
            logger.exception("could not start the next queued run in %s", thread.channel_id)

    # -- decisions ------------------------------------------------------------------------------

    async def maybe_resume(self, session_id: str) -> bool:
        """Resume the paused run once every gated call is decided; exactly one caller does."""
        store = self.ctx.store
        if self.ctx.tasks.closed:
            return False  # shutting down: the next start-up resumes it
        batch = await store.batch_calls(session_id)
        if not batch or not batch_complete(batch):
            return False
        if await store.plane_of_session(session_id) is not None:
            self.ctx.outside.ring()  # here, or a wake-up from the replica that decided
            return await _settle_outside(store, session_id)
        if not await store.claim_resume(session_id):
            return False
        await checkpoint("resume_claimed")
        session = await store.get_session(session_id)
        assert session is not None
        responses = await store.responses_for_batch(session_id)
        await store.resume_started(session_id)
        await checkpoint("resume_started")
        # The same tools as the run that paused: a stored call must not become "unknown".
        gate = self.allowances.gate(Thread.of(session), session_id)
        channel = await self.container.resume_channel(Thread.of(session))
        options = run_options(
            self.ctx.policy,
            self.ctx.tools,
            channel,
            responses,
            gate=gate,
            turn_timeout=self.ctx.deadlines.turn,
        )
        options = bound_options(self.ctx, options, batch)  # previewed files checked first
        stream = self.ctx.agent.run(None, session_for(session_id, channel), options)
        # Progress shows on the first card while the approved calls run.
        card_ts = next((r.card_ts for r in batch if r.needs_approval and r.card_ts), None)
        self.ctx.tasks.spawn(
            self._driver.drive(
                Thread.of(session),
                session_id,
                stream,
                requester=session.requester,
                message_ts=card_ts,
                resuming=True,
                resumed_from=batch,
            ),
            name=f"resume {session_id}",
        )
        return True

    # -- time and restarts ----------------------------------------------------------------------

    async def expire_due(self) -> int:
        """Remind about calls that expire soon; expire those past their time limit, redraw their
        cards and resume their runs."""
        store = self.ctx.store
        await self.freezes.tick()
        await send_reminders(self.ctx, self.cards)
        for row in await climb(self.ctx, self.cards):  # a step's lower quorum was met
            note_decision(self.ctx, row, "approved")
            await self.maybe_resume(row.session_id)
        expired = await store.expire_due(self.ctx.clock())
        for row in expired:
            note_decision(self.ctx, row, "expired")
        for session_id in {row.session_id for row in expired}:
            await self.maybe_resume(session_id)
        return len(expired)

    async def tell_cut(self, recovered: RecoveredSession, started: Sequence[QueueItem]) -> None:
        """A run cut short after a call began (this process's before a restart, or a lapsed
        replica's): counted, its thread told, and its message unmarked (the run never did; not
        one that went without its mark, `QueueItem.unmarked`: nothing to remove)."""
        note_recovered(self.ctx, recovered)
        thread = Thread.of(recovered.session)
        await self.ctx.output.say(thread, Recovered(tuple(r.tool for r in recovered.interrupted)))
        for item in started:
            if item.session_id == recovered.session.id and item.message_ts and not item.unmarked:
                await self.ctx.output.react(thread, item.message_ts, False)

    async def recover(self) -> None:
        """After a restart: requeue runs that had not begun, and those cut before any call ran
        (they answer their stored history: `Store.requeue_interrupted`); tell each thread whose
        run was cut short after a call began, start what was queued before, then redraw the
        cards that show a stale state."""
        store = self.ctx.store
        started = await store.queue_items(states=["started"])
        requeued = await store.requeue_interrupted()
        if requeued:
            logger.info("requeued %s cut short by the restart", count(len(requeued), "run"))
        for recovered in await store.recover():
            await self.tell_cut(recovered, started)
        await self.cards.repost_missing()
        for session in await store.sessions_awaiting_approval():
            # A decision may be recorded with its resume not yet claimed.
            await self.maybe_resume(session.id)
        # What was saved but never processed starts runs, which the steps above must not
        # mistake for runs cut short.
        await self.inbox.recover()
        await self.dispatcher.kick_all()
        # Last: redraw only the cards whose drawn state differs from their call's
        # (a decision, an interruption or a cancel recorded before its redraw), once saved
        # deliveries and queued runs have started; unchanged cards cost no call.
        await self.cards.redraw_stale()

    # -- the front door, continued ------------------------------------------------------------

    async def take_message(
        self, delivery: MessageDelivery, keys: Sequence[str]
    ) -> InboxItem | None:
        """Save a message its front end did not save before its acknowledgement; a database
        that refuses it tells the author, and the `StoreError` is raised (Slack's retry)."""
        try:
            return await self.inbox.save_message(delivery, keys=keys)
        except StoreError:
            await self.ctx.output.say(delivery.thread, NotSaved("message"))
            raise

    async def command(
        self, key: str | None, word: str, channel: str, *, user: str, text: str
    ) -> Notice | None:
        """`/opsgate freeze|unfreeze|delegate …` (`word`), each invocation (`key`) once:
        its answer for `user` alone, or None for an invocation seen before."""
        if key is not None and not await self.ctx.store.first_sighting(key):
            return None
        if word == "freeze":
            return await self.freezes.freeze(channel, user=user, text=text)
        if word == "delegate":
            return await delegate_command(self.ctx, user, text)
        return await self.freezes.unfreeze(channel, user=user)

    def on_call_now(self) -> OnCallNow:
        """Who is on call now, for each rota of the policy."""
        return OnCallNow(oncall_now(self.ctx.policy, self.ctx.clock()))

    def suggested_prompts(self) -> tuple[str, ...]:
        """What a new conversation in the AI-app container is offered."""
        return self.container.suggested_prompts

    async def review_tool(
        self, user: str, server: str, tool: str, digest: str, *, accept: bool
    ) -> ToolReview:
        """A click on a changed MCP tool's review card (`bot.runs.tool_pins`)."""
        return await review_tool(self.ctx, user, server, tool, digest, accept=accept)

    # -- answers --------------------------------------------------------------------------------

    async def pending_for(self, user: str, *, channel: str, team: str | None = None) -> PendingList:
        """The approvals `user` may decide now, each linked to its card."""
        entries: list[PendingEntry] = await self.answers.pending(user, channel=channel, team=team)
        return PendingList(tuple(entries))

    async def help_for(self, channel: str) -> Help:
        """Usage, the policy of `channel`, and the change freezes in force there."""
        info = self.answers.channel_help(channel)
        freezes = await self.freezes.freezes_now(channel)
        return Help(dataclasses.replace(info, freezes=freezes) if freezes else info)


async def _settle_outside(store: Store, session_id: str) -> bool:
    """An outside request's batch is decided: its session ends without a run (the caller runs
    the command, or not); exactly one caller moves it on."""
    if not await store.claim_resume(session_id):
        return False
    await store.resume_started(session_id)
    await store.end_run(session_id)
    return True


# -- queue ---------------------------------------------------------------------------------------
# Starts queued runs, per channel, while the channel has fewer than its `concurrency` running.
#
# The queue lives in the store, so a burst of alerts or a restart loses nothing; every claim is
# one conditional transaction there (`Store.claim_queued`), so however many tasks kick the
# dispatcher at once, no channel goes over its limit and no message starts twice. It is kicked
# whenever a slot may have freed or work arrived: after a message is queued, when a run ends
# (answered, failed or paused for approval), and at start-up.


logger = logging.getLogger("opsgate.dispatcher")


class Dispatcher:
    """`start(item)` must start the item's run in the background (and may raise `RuntimeError`
    when the bot is shutting down: the item then goes back to the queue for the next start)."""

    def __init__(self, store: Store, policy: Policy, start: Callable[[QueueItem], None]) -> None:
        self.store = store
        self.policy = policy
        self._start = start

    async def kick(self, channel: str) -> list[QueueItem]:
        """Start queued runs of `channel` while it has free slots; returns the ones started."""
        limit = self.policy.concurrency_for(channel)
        started: list[QueueItem] = []
        while (item := await self.store.claim_queued(channel, limit=limit)) is not None:
            try:
                self._start(item)
            except RuntimeError:
                logger.info("not starting queued item %d of %s: shutting down", item.id, channel)
                await self.store.release_queued(item.id)
                break
            except BaseException:
                await self.store.release_queued(item.id)
                raise
            started.append(item)
        return started

    async def kick_all(self) -> list[QueueItem]:
        """Start what every channel can (at start-up: what was queued before the restart)."""
        started: list[QueueItem] = []
        for channel in await self.store.queued_channels():
            started += await self.kick(channel)
        return started
