"""Consume one run's stream and show it in its thread; leave the session consistent.

When a run ends (answered, failed, paused, or stopped by `cancel` or its deadline) its queue
item is done and the channel's next queued run may start. A stopped run is closed as recovery
closes one (`Store.stop_run`). Cancelled (the bot is stopping): the session stays `running`, so
the next start-up's recovery runs it again (no call of it began) or tells the thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from agent_core import (
    AgentCoreError,
    AgentResponseUpdate,
    Finish,
    FinishReason,
    TextDelta,
    ToolResult,
)
from agent_core.messages import CallOutcome, Cancelled, Expired, Interrupted, NotRun, Rejected

from ..observability import log_context, log_event, tracing
from ..observability.metrics import RunOutcome, ToolOutcome
from ..store import LateResult, StoredTimeline, ToolCallRow
from .cards import Cards
from .context import LiveRun, RunContext
from .notices import (
    FinishNote,
    Notice,
    RunCrashed,
    RunFailed,
    RunRefused,
    RunStopped,
    ToolNotRun,
    ToolRan,
)
from .output import TextSink, Thread
from .timeline import AllowanceUses, PausedTimelines, Timeline, Waiting, Working

__all__ = ["ERROR_CHARS", "Driver", "conversation_id", "cut_error"]


logger = logging.getLogger("opsgate.runs")

_NOTED = {
    FinishReason.LENGTH: FinishNote("length"),
    FinishReason.CONTENT_FILTER: FinishNote("content_filter"),
    FinishReason.MAX_ROUNDS: FinishNote("max_rounds"),
}


class Driver:
    """Drives runs; `ended(thread, item_id)` is called when a run no longer holds its slot."""

    def __init__(
        self,
        ctx: RunContext,
        cards: Cards,
        ended: Callable[[Thread, int | None], Awaitable[None]],
        resume: Callable[[str], Awaitable[bool]] | None = None,
        allowance_uses: AllowanceUses | None = None,
    ) -> None:
        self.ctx = ctx
        self.cards = cards
        self._ended = ended
        self._resume = resume
        """Resumes a batch the policy decided at once (a forbidden call), after the run ended."""
        self.allowance_uses = allowance_uses or AllowanceUses()
        """Calls the allowance gate let through (the timeline says whose allowance it was)."""
        self.paused = PausedTimelines()
        """Paused runs' timelines, open for the counts of partial decisions."""

    async def drive(
        self,
        thread: Thread,
        session_id: str,
        stream: AsyncGenerator[AgentResponseUpdate, None],
        *,
        requester: str | None,
        message_ts: str | None,
        item_id: int | None = None,
        resuming: bool = False,
        resumed_from: Sequence[ToolCallRow] = (),
        marked: bool = False,
        unmarked: bool = False,
    ) -> None:
        """`resuming`: the stream answers a paused batch (the timeline starts with it);
        `resumed_from`: that paused batch (its span is linked to); `marked`: the message is
        marked as being worked on already (a run asked again after a crash: its first try's
        mark is in Slack or the outbox, and marking again would let the unmark cancel the new
        mark alone, leaving the first); `unmarked`: its queue item says a try before went
        without the mark (Slack's budget for it was spent)."""
        links = tracing.links_to((row.trace_id, row.span_id) for row in resumed_from)
        with (
            log_context(session=session_id, thread=thread.thread_ts),
            tracing.run_span(conversation_id(thread), links),
        ):
            await self._drive(
                thread,
                session_id,
                stream,
                requester=requester,
                message_ts=message_ts,
                item_id=item_id,
                resuming=resuming,
                marked=marked,
                unmarked=unmarked,
            )

    async def _drive(
        self,
        thread: Thread,
        session_id: str,
        stream: AsyncGenerator[AgentResponseUpdate, None],
        *,
        requester: str | None,
        message_ts: str | None,
        item_id: int | None,
        resuming: bool,
        marked: bool,
        unmarked: bool,
    ) -> None:
        output = self.ctx.output
        if message_ts and not marked:
            made = await output.react(thread, message_ts, True)
            if item_id is not None and made == unmarked:  # whoever unmarks it after a crash
                await _quietly(
                    self.ctx.store.queue_unmarked(item_id, not made), "recording the mark"
                )
        try:
            # The paused part's calls as decided: one approved is no longer shown waiting there.
            batch = await self.ctx.store.batch_calls(session_id) if resuming else ()
            later = partial(self.ctx.tasks.spawn, name="settling a paused timeline")
            handed = await self.paused.close(session_id, batch, later=later)
        except Exception:
            logger.exception("ending the paused timeline failed")
            handed = None
        shown = _Shown(self, thread, session_id, requester, message_ts)
        await _quietly(shown.begin(resuming, handed), "starting the timeline")
        failed = False
        stopping = False
        live: LiveRun | None = None
        try:
            async with self.ctx.live.bounded(session_id, self.ctx.deadlines.run) as live:
                async for update in stream:
                    await shown.show(update)
        except asyncio.CancelledError:
            stopping = True  # the next start-up's recovery runs it again or reports it
            raise
        except LateResult as exc:
            # Another replica took the run over while this one stalled and told the thread; the
            # result is audited. Nothing more to say, and no traceback: nothing is broken here.
            logger.warning("run %s: %s", session_id, exc)
        except AgentCoreError as exc:
            logger.warning("run %s refused: %s", session_id, exc)
            self._finished("failed")
            await output.say(thread, RunRefused(cut_error(str(exc)) or ""))
        except Exception as exc:
            logger.exception("run %s crashed", session_id)
            failed = True
            self._finished("failed")
            await output.say(thread, RunCrashed(type(exc).__name__))
        else:
            await _quietly(shown.close(), "finishing the answer")  # whether Slack took it
            self._finished(_outcome(shown.outcome, live, lost=shown.lost))
        finally:
            # Each step on its own: an output error here must not keep the session `running`
            # (holding the channel's slot) or skip starting the next queued run.
            await stream.aclose()
            await _quietly(shown.close(), "finishing the answer")
            await _quietly(shown.end(), "ending the timeline")
            stopped = None if stopping or live is None else live.stopped()
            if stopped is not None:
                await _quietly(self._stop(thread, session_id, stopped), "stopping the run")
            elif not stopping and not shown.answered:
                # Only a run still `running` ends here; a paused one stays awaiting_approval.
                await _quietly(self.ctx.store.end_run(session_id, failed=failed), "ending the run")
            # A run stopped by a shutdown keeps its mark: it is owed, and the next start-up's
            # recovery unmarks it (as after a crash), which it would otherwise do twice.
            if message_ts and not shown.answered and not stopping:
                await _quietly(output.react(thread, message_ts, False), "unmarking the message")
            if not stopping:
                await self._ended(thread, item_id)
            if shown.refused and not stopping and self._resume is not None:
                await _quietly(self._resume(session_id), "resuming after a forbidden call")

    def _finished(self, outcome: RunOutcome | None) -> None:
        """Count and log a run that ended (None: it paused for approval, so it has not)."""
        if outcome is None:
            return
        self.ctx.observer.run_finished(outcome)
        log_event("run.finished", outcome=outcome)

    async def _stop(self, thread: Thread, session_id: str, notice: RunStopped) -> None:
        """Close a stopped run's session as recovery would, and tell the thread. A run that
        had paused meanwhile is left awaiting its decisions."""
        closed = await self.ctx.store.stop_run(session_id, why=notice.why, by=notice.by)
        if closed is None:
            return
        tools = tuple(row.name for row in closed.interrupted)
        logger.info("run %s stopped (%s)", session_id, notice.why)
        await self.ctx.output.say(thread, dataclasses.replace(notice, interrupted=tools))


class _Shown:
    """One run's updates, as the thread sees them."""

    def __init__(
        self,
        driver: Driver,
        thread: Thread,
        session_id: str,
        requester: str | None,
        message_ts: str | None,
    ):
        self.driver = driver
        self.output = driver.ctx.output
        self.thread = thread
        self.session_id = session_id
        self.requester = requester
        self.message_ts = message_ts
        self.answered = False
        """The run ended when its answer's ending was kept (`answer_kept`), before Slack had it."""
        self.sink: TextSink | None = None
        uses = driver.allowance_uses
        self.timeline = Timeline(self.output.timeline(thread, requester), uses.granted_by)
        self.chars = 0
        """Characters of answer streamed so far (bounded by `Deadlines.answer_chars`)."""
        self.outcome: RunOutcome | None = "completed"
        """How the run ended, as far as the stream says; None once it paused for approval."""
        self.refused = False
        """The policy refused a call of the paused batch itself (forbidden)."""
        self.lost = False
        """Slack never took the end of an answer of this run (`TextSink.lost`)."""
        self.kept = False
        """The timeline's message is kept with the run (`Store.keep_timeline`) or was gone
        on in: the run's end drops it."""

    async def answer_kept(self) -> None:
        """The output holds what the thread still lacks of the final answer, durably: end the
        run and unmark its message now, so that a kill before Slack shows the answer is not
        reported as a run cut short (the outbox shows it after the restart)."""
        if await self.driver.ctx.store.end_run(self.session_id):
            self.answered = True
            if self.message_ts:
                await self.output.react(self.thread, self.message_ts, False)

    async def close(self) -> None:
        if self.sink is not None:
            sink, self.sink = self.sink, None
            try:
                await sink.close()
            finally:
                self.lost = self.lost or sink.lost

    async def say(self, notice: Notice) -> None:
        await self.output.say(self.thread, notice)

    async def begin(self, resuming: bool, handed: StoredTimeline | None = None) -> None:
        """The thread shows the run working; a resume's timeline starts with its batch, in
        the paused part's message where it can go on in it (`handed` by this process's paused
        timeline, else kept in the store: a restart, another replica)."""
        await self.output.status(self.thread, Working())
        if resuming:
            store = self.driver.ctx.store
            batch = await store.batch_calls(self.session_id)
            kept = handed or await store.kept_timeline(self.session_id)
            if kept is not None:
                self.kept = await self.timeline.go_on(kept, batch)
            await self.timeline.seed(batch)

    async def end(self) -> None:
        store = self.driver.ctx.store
        if self.outcome is None:  # paused: open for partial decisions, still saying whom
            await self.driver.paused.keep(self.session_id, self.timeline)  # it waits for
            if (kept := self.timeline.handover()) is not None:
                await store.keep_timeline(self.session_id, kept.ts, kept.shown)
                self.kept = True
            return
        await self.timeline.close()
        if self.kept:
            await store.drop_timeline(self.session_id)
        await self.output.status(self.thread, None)

    async def paused(self) -> None:
        """The cards are posted: each gated task waits, linked to its card."""
        ctx, channel = self.driver.ctx, self.thread.channel_id
        needed = ctx.policy.required_approvals_for(channel)
        for row in await ctx.store.batch_calls(self.session_id):
            if row.needs_approval and row.status == "pending":
                link = await self.driver.cards.link(row)
                await self.timeline.waiting(row, needed, link.permalink)
        approvers = ctx.policy.approvers_for(channel)
        await self.output.status(self.thread, Waiting(approvers.users, approvers.groups))

    async def _append(self, text: str) -> None:
        """Stream `text`, up to the answer's limit: past it the run is stopped (its stream
        closed, so neither the provider's bytes nor the answer grow any further)."""
        limit = self.driver.ctx.deadlines.answer_chars
        if limit is not None and self.chars + len(text) > limit:
            text = text[: max(0, limit - self.chars)]
            if self.driver.ctx.live.cut_answer(self.session_id, limit):
                logger.warning("run %s: answer past %d characters, stopped", self.session_id, limit)
        if not text or (limit is not None and self.chars >= limit):
            return
        self.chars += len(text)
        if self.sink is None:
            self.sink = self.output.stream(self.thread, self.requester)
        await self.sink.append(text)

    async def show(self, update: AgentResponseUpdate) -> None:
        await self.timeline.update(update)
        match update:
            case Finish(finish_reason=FinishReason.STOP) if self.sink is not None:
                sink, self.sink = self.sink, None
                try:
                    await sink.finish(self.session_id, self.answer_kept)
                finally:
                    self.lost = self.lost or sink.lost
            case _:
                pass
        match update:
            case TextDelta(text=text):
                await self._append(text)
                return
            case _:
                await self.close()
        match update:
            case ToolResult(outcome=None):
                if update.seconds is not None:
                    _tool_ran(self.driver.ctx, update, update.seconds)
                result = ToolRan(update.name, update.call_id, update.content, update.is_error)
                await self.say(result)
            case ToolResult(outcome=outcome) if outcome is not None:
                self.driver.ctx.observer.tool_finished(update.name, _not_run(outcome), 0.0)
                await self.say(ToolNotRun(update.name, outcome))
            case Finish(finish_reason=FinishReason.AWAITING_APPROVAL):
                # The store already says awaiting_approval; the end of the run leaves it so.
                self.outcome = None
                if (ids := tracing.current_ids()) is not None:
                    await self.driver.ctx.store.note_trace(self.session_id, *ids)
                self.refused = await self.driver.cards.post_all(self.thread, self.session_id)
                await _quietly(self.paused(), "showing the pause")
            case Finish(finish_reason=FinishReason.ERROR, error=error):
                self.outcome = "failed"
                if error and len(error) > ERROR_CHARS:
                    logger.warning("run %s failed: %s", self.session_id, error)
                await self.say(RunFailed(cut_error(error)))
            case Finish(finish_reason=reason) if reason in _NOTED:
                await self.say(_NOTED[reason])
            case _:
                pass


def _tool_ran(ctx: RunContext, result: ToolResult, seconds: float) -> None:
    """Count and log one tool execution (a call answered without running is not one)."""
    outcome: ToolOutcome = "timeout" if result.timed_out else "error" if result.is_error else "ok"
    ctx.observer.tool_finished(result.name, outcome, seconds)
    tracing.tool_span(result.name, result.call_id, seconds, outcome=outcome)
    log_event(
        "tool.executed",
        call=result.call_id,
        tool=result.name,
        outcome=outcome,
        seconds=round(seconds, 3),
    )


def _not_run(outcome: CallOutcome) -> ToolOutcome:
    """The `opsgate_tool_seconds` outcome of a call answered without running."""
    match outcome:
        case Rejected():
            return "rejected"
        case Expired():
            return "expired"
        case Cancelled() | NotRun(cancelled_by=str()):
            return "cancelled"
        case NotRun() | Interrupted():
            return "interrupted"


def conversation_id(thread: Thread) -> str:
    """`gen_ai.conversation.id`: the thread, as Slack names it."""
    return f"{thread.channel_id}/{thread.thread_ts}"


def _outcome(
    shown: RunOutcome | None, live: LiveRun | None, *, lost: bool = False
) -> RunOutcome | None:
    """How the run ended for the metrics: a stop (cancel or deadline) overrides what it showed;
    a completed run whose answer Slack never took is `answer_lost`, not completed."""
    stopped = None if live is None else live.stopped()
    if stopped is None:
        return "answer_lost" if shown == "completed" and lost else shown
    return "cancelled" if stopped.why == "cancelled" else "failed"


async def _quietly(step: Awaitable[Any], what: str) -> None:
    """Run a clean-up step; log (don't raise) if it fails, so the next step still runs."""
    try:
        await step
    except Exception:
        logger.exception("%s failed", what)


# -- bounds --------------------------------------------------------------------------------------
# Bounds on what a run posts that it does not control: a provider's error text can be a whole
# HTML page or a 40,000-character dump, and would be posted whole (and split over messages).


ERROR_CHARS = 1_000
"""The most of an error's text shown in a thread; the log keeps the whole of it."""


def cut_error(text: str | None, limit: int = ERROR_CHARS) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters cut; see the bot's log)"
