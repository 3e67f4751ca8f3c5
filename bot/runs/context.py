"""What every part of the run service shares (the store, the agent, the policy, the output),
the runs going in this process with their deadlines, and the context a run starts in: its
channel's instructions and tool set, and, in Slack's AI-app container, which channel that is.

The run options and the container are the two halves of one question (which channel's policy
does this run get, and what does it add), asked by the service when a run starts or resumes.
The shadow policy the context carries is judged here too, beside the live one, by the run's
approval gate (`bot.runs.edits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from agent_core import (
    AgentRunOptions,
    AgentSession,
    ApprovalGate,
    ChatClientAgent,
    ChatMessage,
    Tool,
    ToolApprovalResponse,
    ToolCall,
)

from ..approvals import Approvals
from ..policy import GateDecision, Policy, call_verdict, compare_verdicts
from ..store import Store, ToolCallRow, WriteHealth
from ..tasks import TaskSupervisor
from .metrics import NoObserver, RunObserver
from .notices import RunStopped
from .output import Thread, ThreadOutput

if TYPE_CHECKING:
    from .inbox import Replay


__all__ = [
    "CHANNEL_KEY",
    "WHOLE_DM",
    "ChannelInstructions",
    "Container",
    "Deadlines",
    "LiveRun",
    "LiveRuns",
    "OutsideDecisions",
    "RunContext",
    "RunStart",
    "judge_in_shadow",
    "load_shadow",
    "run_options",
    "session_for",
    "thread_of",
]


# -- live ----------------------------------------------------------------------------------------
# The runs going in this process, each under its deadline, so `cancel` can stop one.
#
# A run is bounded by `asyncio.timeout(run_timeout)` around the consumption of its stream;
# cancelling it reschedules that deadline to now, so both ways out take the same path: the
# stream is closed, the model turn or tool call in flight is cancelled, and the driver hands the
# session to `Store.stop_run` (see docs/architecture.md, "Run states").


@dataclass(frozen=True, slots=True)
class Deadlines:
    """Seconds one model turn (`turn`) and one run, or one resume, (`run`) may take."""

    turn: float | None = None
    run: float | None = None
    answer_chars: int | None = None
    """And how long one run's streamed answer may grow (characters; None: unbounded)."""


@dataclass
class LiveRun:
    """One going run: its deadline, and why it was stopped once it was."""

    deadline: asyncio.Timeout
    seconds: float | None
    cancelled_by: str | None = None
    answer_cut: int | None = None
    """Set when the answer grew past its limit (that many characters were kept)."""

    def stopped(self) -> RunStopped | None:
        """Why the run was stopped (None: it was not, it ended on its own)."""
        if self.cancelled_by is not None:
            return RunStopped("cancelled", by=self.cancelled_by)
        if self.answer_cut is not None:
            return RunStopped("answer_too_long", chars=self.answer_cut)
        if self.deadline.expired():
            return RunStopped("deadline", seconds=self.seconds)
        return None


class LiveRuns:
    """Session id -> the run going for it in this process."""

    def __init__(self) -> None:
        self._runs: dict[str, LiveRun] = {}

    @contextlib.asynccontextmanager
    async def bounded(self, session_id: str, seconds: float | None) -> AsyncIterator[LiveRun]:
        """Hold the session's run under its deadline. A stop (deadline or cancel) ends the
        body early and is not raised: the caller asks `LiveRun.stopped()`."""
        live: LiveRun | None = None
        try:
            async with asyncio.timeout(seconds) as deadline:
                live = LiveRun(deadline, seconds)
                self._runs[session_id] = live
                try:
                    yield live
                finally:
                    if self._runs.get(session_id) is live:
                        del self._runs[session_id]
        except TimeoutError:
            if live is None or not live.deadline.expired():
                raise  # not ours: a bounded step inside the run timed out

    def cancel(self, session_id: str, *, by: str) -> bool:
        """Stop the session's run if it is going here; False if it is not (or already
        stopping)."""
        live = self._runs.get(session_id)
        if live is None or live.stopped() is not None:
            return False
        live.cancelled_by = by
        live.deadline.reschedule(asyncio.get_running_loop().time())
        return True

    def cut_answer(self, session_id: str, chars: int) -> bool:
        """Stop the session's run because its answer reached `chars` (see `cancel`)."""
        live = self._runs.get(session_id)
        if live is None or live.stopped() is not None:
            return False
        live.answer_cut = chars
        live.deadline.reschedule(asyncio.get_running_loop().time())
        return True

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._runs


# -- context ---------------------------------------------------------------------------------------


class OutsideDecisions:
    """Rings when an outside request's call (the approval plane's) was decided, here or on
    another replica (its wake-up): the plane's long polls wait on `rung` and read again."""

    def __init__(self) -> None:
        self.rung = asyncio.Event()
        """Set, and replaced by a new one, at each ring."""

    def ring(self) -> None:
        self.rung.set()
        self.rung = asyncio.Event()


@dataclass(frozen=True)
class RunContext:
    store: Store
    agent: ChatClientAgent
    policy: Policy
    tools: Mapping[str, Tool]
    output: ThreadOutput
    approvals: Approvals
    tasks: TaskSupervisor
    clock: Callable[[], datetime]
    """Now, as aware UTC (tests pass a fixed clock)."""
    health: WriteHealth = field(default_factory=WriteHealth)
    """Whether the database took the last write (the health check reads it)."""
    observer: RunObserver = field(default_factory=NoObserver)
    """Hears of runs ended and decisions (metrics); see `bot.runs.metrics`."""
    deadline_set: Callable[[], None] = lambda: None
    """Called when a card's expiry is set, so the expiry timer can wake for an earlier one."""
    deadlines: Deadlines = field(default_factory=Deadlines)
    """How long a model turn and a run may take (settings; none by default)."""
    live: LiveRuns = field(default_factory=LiveRuns)
    """The runs going in this process, for `cancel`."""
    shadow: Policy | None = None
    """A policy every live call is also judged by, never acted on (`bot.runs.context`)."""
    outside: OutsideDecisions = field(default_factory=OutsideDecisions)
    """Rung when an outside request's call was decided (`bot.plane` waits on it)."""
    replay: Replay | None = None
    """How the front end handles again a request an earlier process saved but never handled
    (Slack: `bot.slack.app.replayer`); None: such requests are only marked done."""


async def thread_of(ctx: RunContext, row: ToolCallRow) -> Thread | None:
    """The thread of a call's row (None when its session is gone): through `Thread.of`."""
    session = await ctx.store.get_session(row.session_id)
    if session is None:
        return None
    return Thread.of(session)


# -- a channel's run options ------------------------------------------------------------------
# What a channel's policy adds to each run there: its instructions and its tool set.
#
# Both apply to every model request of a session, the first run and each resume alike: a resume
# offered fewer tools than the run that paused would answer a stored call "unknown tool".


CHANNEL_KEY = "channel"
"""The `AgentSession.metadata` key naming the Slack channel a session lives in."""


def session_for(session_id: str, channel: str) -> AgentSession:
    """The agent session of a Slack thread, carrying its channel for the context providers."""
    return AgentSession(session_id, metadata={CHANNEL_KEY: channel})


class ChannelInstructions:
    """An agent_core `ContextProvider`: the channel's `instructions` as a system message.

    They come from the policy file (trusted configuration), are sent with every request of the
    run and are never stored in the history, so editing the policy changes the next run.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    async def on_invoking(
        self, session: AgentSession, messages: Sequence[ChatMessage]
    ) -> Sequence[ChatMessage]:
        channel = session.metadata.get(CHANNEL_KEY)
        text = self.policy.instructions_for(channel) if isinstance(channel, str) else None
        if not text:
            return []
        return [ChatMessage.system(f"Instructions for this channel ({channel}):\n{text}")]

    async def on_invoked(
        self,
        session: AgentSession,
        request: Sequence[ChatMessage],
        response: Sequence[ChatMessage],
    ) -> None:
        return None


def run_options(
    policy: Policy,
    tools: Mapping[str, Tool],
    channel: str,
    responses: Iterable[ToolApprovalResponse] = (),
    gate: ApprovalGate | None = None,
    turn_timeout: float | None = None,
) -> AgentRunOptions:
    """Run options for a run in `channel`: its tool set (when the policy restricts it), and
    the run's approval gate (the channel's allowances) when given."""
    offered = policy.offered_tools(channel, tools)
    return AgentRunOptions(
        tools=offered,
        tool_approval_responses=tuple(responses),
        approval_gate=gate,
        turn_timeout=turn_timeout,
    )


# -- the AI-app container ---------------------------------------------------------------------
# The AI-app container (Slack's agent messaging experience, and the older split view): which
# channel each conversation there is looking at, the prompts it offers at the start, and its
# title from the first request (split view only).
#
# A conversation in the container is a DM thread and a session like any other thread: the same
# approvals, cards and audit. What the container adds is context: the user tells Slack which
# channel they are looking at, and a run in that conversation then gets that channel's
# instructions and tool set (`run_start`), if the bot acts in that channel at all. Approvals
# stay those of the thread where the cards are posted.
#
# The context is kept in the store (`Store.note_assistant_thread`), so it holds across restarts
# and across the processes sharing a database. A run pins the channel it started with, and its
# resume uses the same one (a resume offered other tools would answer a stored call "unknown").


@dataclass(frozen=True, slots=True)
class RunStart:
    """What a new run of a thread starts with: the channel whose policy applies, and whether
    it is the conversation's first request (which names it)."""

    channel: str
    first: bool = False


class Container:
    """What the service knows about conversations in the AI-app container (kept in the store)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    @property
    def suggested_prompts(self) -> tuple[str, ...]:
        """`[defaults] suggested_prompts`, at most four."""
        return self.ctx.policy.defaults.suggested_prompts

    async def started(self, thread: Thread, viewing: str | None) -> tuple[str, ...]:
        """A conversation opened in the container (looking at `viewing`, when Slack says):
        the prompts to offer."""
        await self.viewing(thread, viewing)
        return self.suggested_prompts

    async def viewing(self, thread: Thread, channel: str | None) -> None:
        """The user of a container conversation now looks at `channel` (None: no channel);
        one the bot does not act in counts as none (the DM's own policy applies)."""
        elsewhere = bool(channel) and channel != thread.channel_id
        if not (elsewhere and channel and self.ctx.policy.allows_channel(channel)):
            channel = None
        await self.ctx.store.note_assistant_thread(*_key(thread), viewing=channel)

    async def run_start(self, thread: Thread) -> RunStart:
        """The channel whose instructions and tools a new run of the thread gets: the one its
        user looks at in the container, else the thread's own. Pinned for the resume."""
        if _is_dm(thread) and (whole := await self._whole_dm(thread)) is not None:
            return whole
        found = await self.ctx.store.assistant_thread(*_key(thread))
        if found is None:  # not a container conversation: one read, nothing written
            return RunStart(thread.channel_id)
        channel = found.viewing_channel or thread.channel_id
        first = await self.ctx.store.pin_assistant_run(*_key(thread), run_channel=channel)
        return RunStart(channel, first)

    async def _whole_dm(self, thread: Thread) -> RunStart | None:
        """The agent messaging experience: what the user looks at is kept for their DM as a
        whole (`app_context_changed`); a run in one of its threads takes it and pins it on that
        thread, as the resume reads it. Its threads are not named (Slack titles them)."""
        store = self.ctx.store
        whole = await store.assistant_thread(thread.team_id, thread.channel_id, WHOLE_DM)
        if whole is None:
            return None
        channel = whole.viewing_channel or thread.channel_id
        await store.note_assistant_thread(*_key(thread), viewing=whole.viewing_channel)
        await store.pin_assistant_run(*_key(thread), run_channel=channel)
        return RunStart(channel)

    async def resume_channel(self, thread: Thread) -> str:
        """The channel the paused run started with (the thread's own when not known)."""
        found = await self.ctx.store.assistant_thread(*_key(thread))
        pinned = found.run_channel if found is not None else None
        return pinned or thread.channel_id


WHOLE_DM = ""
"""The thread ts under which a DM as a whole keeps its context (the agent messaging
experience: `app_context_changed` names no thread)."""


def _is_dm(thread: Thread) -> bool:
    """A DM with the app (Slack's DM ids start with D), in one of its threads."""
    return thread.channel_id.startswith("D") and thread.thread_ts != WHOLE_DM


def _key(thread: Thread) -> tuple[str, str, str]:
    return thread.team_id, thread.channel_id, thread.thread_ts


# -- the shadow policy ------------------------------------------------------------------------
# The shadow policy: every live call judged a second time, by a policy that is not acted on.
#
# `OPSGATE_SHADOW_POLICY` (or `[shadow] policy` in the policy file) names it; it is read once at
# start-up like the live one (a file that does not load stops start-up, naming the key). Where
# the live gate judges a call (`bot.runs.edits`), `judge_in_shadow` asks the shadow policy's own
# `decide` too and compares the two verdicts in the call's channel (`bot.policy.compare_verdicts`:
# rule, verdict, approvers, quorum; not freezes or allowances, which are the same for both). A
# difference is counted (`opsgate_shadow_differences_total{direction,rule}`) and audited
# (`shadow_differs`); nothing else happens, and a failure here is logged, never raised into the
# live decision.


logger = logging.getLogger("opsgate.runs")


def load_shadow(configured: Path | None, policy: Policy) -> Policy | None:
    """The shadow policy `configured` (the setting) or the policy's `[shadow] policy` names;
    None when neither does."""
    path = configured or policy.shadow_path
    if path is None:
        return None
    shadow = Policy.load(path)
    logger.warning(
        "shadow policy %s: every call is also judged by it, not acted on; differences are "
        "counted (opsgate_shadow_differences_total) and audited (shadow_differs)",
        path,
    )
    return shadow


async def judge_in_shadow(
    ctx: RunContext,
    tool: Tool,
    call: ToolCall,
    live: GateDecision,
    *,
    channel: str,
    session_id: str,
) -> None:
    """Judge `call` by the shadow policy too; count and audit a difference (see the module)."""
    shadow = ctx.shadow
    if shadow is None:
        return
    try:
        other = shadow.decide(tool, call)
        before = call_verdict(ctx.policy, live, channel)
        after = call_verdict(shadow, other, channel)
        direction = compare_verdicts(before, after)
        if direction is None:
            return
        deciding = live if direction == "looser" else other
        ctx.observer.shadow_differs(direction, deciding.policy_rule or "none")
        await ctx.store.audit(
            "shadow_differs",
            actor=None,
            session_id=session_id,
            call_id=call.id,
            details={
                "tool": call.name,
                "direction": direction,
                "live": before.as_json(),
                "shadow": after.as_json(),
                "shadow_policy": shadow.source,
            },
        )
    except Exception:  # the shadow never changes the live decision, even by failing
        logger.exception("shadow policy: judging call %r failed", call.id)
