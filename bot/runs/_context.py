"""What every part of the run service shares: the store, the agent, the policy, the output."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from agent_core import ChatClientAgent, Tool

from .._tasks import TaskSupervisor
from ..approvals import Approvals
from ..policy import Policy
from ..store import Store, ToolCallRow, WriteHealth
from ._live import Deadlines, LiveRuns
from .observer import NoObserver, RunObserver
from .output import Thread, ThreadOutput

__all__ = ["RunContext", "thread_of"]


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
    """How a user id is named to the model ("rejected by …")."""
    health: WriteHealth = field(default_factory=WriteHealth)
    """Whether the database took the last write (the health check reads it)."""
    observer: RunObserver = field(default_factory=NoObserver)
    """Hears of runs ended and decisions (metrics); see `bot.runs.observer`."""
    deadline_set: Callable[[], None] = lambda: None
    """Called when a card's expiry is set, so the expiry timer can wake for an earlier one."""
    deadlines: Deadlines = field(default_factory=Deadlines)
    """How long a model turn and a run may take (settings; none by default)."""
    live: LiveRuns = field(default_factory=LiveRuns)
    """The runs going in this process, for `cancel`."""


async def thread_of(ctx: RunContext, row: ToolCallRow) -> Thread | None:
    session = await ctx.store.get_session(row.session_id)
    if session is None:
        return None
    return Thread(session.team_id, session.channel_id, session.thread_ts)
