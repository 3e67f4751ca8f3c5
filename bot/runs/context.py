"""What every part of the run service shares (the store, the agent, the policy, the output),
and the runs going in this process with their deadlines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from agent_core import ChatClientAgent, Tool

from ..approvals import Approvals
from ..policy import Policy
from ..store import Store, ToolCallRow, WriteHealth
from ..tasks import TaskSupervisor
from .metrics import NoObserver, RunObserver
from .notices import RunStopped
from .output import Thread, ThreadOutput

if TYPE_CHECKING:
    from .inbox import Replay

__all__ = ["Deadlines", "LiveRun", "LiveRuns", "OutsideDecisions", "RunContext", "thread_of"]


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
    """A policy every live call is also judged by, never acted on (`bot.runs.shadow`)."""
    outside: OutsideDecisions = field(default_factory=OutsideDecisions)
    """Rung when an outside request's call was decided (`bot.plane` waits on it)."""
    replay: Replay | None = None
    """How the front end handles again a request an earlier process saved but never handled
    (Slack: `bot.slack.intake.replayer`); None: such requests are only marked done."""


async def thread_of(ctx: RunContext, row: ToolCallRow) -> Thread | None:
    """The thread of a call's row (None when its session is gone): through `Thread.of`."""
    session = await ctx.store.get_session(row.session_id)
    if session is None:
        return None
    return Thread.of(session)
