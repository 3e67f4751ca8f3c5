"""A run as a timeline: one `Task` per tool call, its status following the call.

The driver (`bot.runs.driver`) feeds every update of a run's stream to a `Timeline`, which keeps
one typed `Task` per call and hands each change to the output's `TimelineSink`: Slack shows the
tasks in the streamed answer (`bot.slack.timeline`), the terminal prints one line per task
(`bot.cli.notices`). The statuses are the run's own words (waiting for approval, rejected,
expired, not run); each output maps them to what its medium can show.

A run that pauses leaves its timeline with the gated calls waiting (each linked to its card,
with its count of approvals): `PausedTimelines` keeps it, so that a decision that is not yet the
last one ("1 of 2") redraws its task. The next run of the session (the resume) closes it and
starts a new one, seeded from the ledger with the decisions taken meanwhile. Where the paused
timeline is one message edited in place (`TimelineSink.message`: Slack without streaming), the
resume goes on in that message (`Timeline.go_on`) with the tasks it showed, so a run has one
timeline message through its pauses; the message and its tasks are kept with the run in the
store (`handover`), for a resume after a restart or on another replica.

Changes are shown when the run waits (`TimelineSink.flush`): when a tool starts, when a batch
is answered, when the run pauses, when it ends. When it waits with no task moving (it paused for
people, or every call of the batch is answered and the model is asked next) the sink `rest`s
instead: Slack ends the timeline's stream then, not in the burst of the run's last words; a later
change edits the same message. What changed in between (five calls written,
gated, one answered and the next started) reaches the output together, the latest state of
each task only, so a run costs Slack about one write per tool, not one per status change.

The plan: where the model numbers its steps in the text it writes before its tool calls
(`plan_steps`: a list "1. … 2. …" of two steps or more), the sink shows them (`TimelineSink.plan`)
above the tasks; a later turn with another list shows that one instead.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from agent_core import (
    AgentResponseUpdate,
    TextDelta,
    ToolApprovalRequest,
    ToolCallEnded,
    ToolCallHeld,
    ToolResult,
    ToolRunning,
)

from ..store import StoredTimeline

if TYPE_CHECKING:
    from ..store import ToolCallRow

__all__ = [
    "AllowanceUses",
    "AssistantStatus",
    "PausedTimelines",
    "Task",
    "TaskStatus",
    "Timeline",
    "TimelineSink",
    "Waiting",
    "Working",
    "plan_steps",
]

TaskStatus = Literal[
    "pending",
    "waiting",
    "in_progress",
    "complete",
    "error",
    "rejected",
    "expired",
    "not_run",
    "approved",
]
"""Where one call is: `waiting` for approval (see `Task.approvals`); `error` ran and failed;
`rejected`, `expired` and `not_run` (cancelled, interrupted, never started) did not run;
`approved`, in a paused part's timeline its resume does not go on in (a stream): the wait is
over and the call carries on in the resume's own timeline."""

_FINAL: frozenset[TaskStatus] = frozenset(
    {"complete", "error", "rejected", "expired", "not_run", "approved"}
)


@dataclass(frozen=True, slots=True)
class Task:
    """One tool call as the timeline shows it. `arguments` is the call's raw (untrusted) text:
    the renderer escapes and cuts it."""

    call_id: str
    tool: str
    arguments: str
    status: TaskStatus = "pending"
    approvals: tuple[int, int] | None = None
    """While waiting: (approvals so far, approvals needed)."""
    card_link: str | None = None
    """A link to the call's approval card, when it has one."""
    seconds: float | None = None
    """How long it ran (complete or error)."""
    decided_by: str | None = None
    """Who approved or rejected it (a user id), when someone did."""
    allowance_by: str | None = None
    """Who granted the allowance it ran under, when it ran without a card thanks to one."""

    @property
    def final(self) -> bool:
        return self.status in _FINAL


class TimelineSink(Protocol):
    """Where one run's timeline is shown: `show` each changed task (and `plan` the model's
    steps, raw untrusted text), `flush` when the run waits, then `close`.

    An output may hold what `show` and `plan` give it until `flush` (or `close`) and then send
    only the latest state of each task, in one write (Slack: one `appendStream`)."""

    async def show(self, task: Task) -> None: ...

    async def plan(self, steps: tuple[str, ...]) -> None: ...

    async def flush(self) -> None:
        """Send what is held: the run now waits (a tool runs, the model or a person decides)."""
        ...

    async def rest(self) -> None:
        """No task moves for a while (the run paused for people, or the model is asked next):
        send what is held, and let the medium end what only lasts while tasks move (Slack:
        the stream, which it ends when idle anyway); later changes (a partial count, a later
        turn's calls) still show in the same place."""
        ...

    async def close(self) -> None:
        """The timeline is done (the run ended); sends what is held first; idempotent."""
        ...

    def message(self) -> str | None:
        """The one message the timeline is shown in, when a resume can go on editing it (Slack:
        a posted message; not a stream, which a resume cannot reopen); else None."""
        ...

    def adopt(self, message: str) -> None:
        """Go on in `message` (a paused part's `message()`): changes edit it, none posts."""
        ...


@dataclass(frozen=True, slots=True)
class Working:
    """The model is working on the thread's request."""

    kind: Literal["working"] = "working"


@dataclass(frozen=True, slots=True)
class Waiting:
    """The run waits for a decision from these people or user groups (none: anyone there)."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    kind: Literal["waiting"] = "waiting"


AssistantStatus = Working | Waiting
"""What a thread's status line says while a run is going (`ThreadOutput.status`)."""


class AllowanceUses:
    """Which calls the allowance gate let through, and whose allowance it was: the gate learns
    it before the call runs, the timeline asks when it shows the call. Bounded: a run that never
    shows its calls (stopped) leaves at most `limit` entries behind."""

    def __init__(self, limit: int = 512) -> None:
        self._by_call: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def note(self, call_id: str, granted_by: str) -> None:
        self._by_call[call_id] = granted_by
        while len(self._by_call) > self._limit:
            self._by_call.popitem(last=False)

    def granted_by(self, call_id: str) -> str | None:
        return self._by_call.get(call_id)


ARGUMENTS_SHOWN = 80
"""Characters of a call's arguments kept for its title (the renderer cuts to its medium)."""
PLAN_STEPS = 12
"""Most steps of a plan kept (a longer list is a list, not a plan)."""
PLAN_TEXT_KEPT = 8_000
"""Characters of a turn's text before its calls kept to look for a plan in."""
_STEP = re.compile(r"^\s{0,3}(\d{1,2})[.)]\s+(\S.*)$")


def plan_steps(text: str) -> tuple[str, ...]:
    """The model's steps in `text`: the last list of lines numbered 1, 2, … in order ("1." or
    "1)" at a line's start), when it has two to `PLAN_STEPS` items; else (). Only an item's
    first line is kept; other lines between items are allowed (a step's details)."""
    steps: list[str] = []
    found: list[str] = []
    for line in text.splitlines():
        match = _STEP.match(line)
        if match is None:
            continue
        number, step = int(match.group(1)), match.group(2).strip()
        if number == 1:
            if len(steps) >= 2:
                found = steps
            steps = [step]
        elif number == len(steps) + 1 and steps:
            steps.append(step)
    if len(steps) >= 2:
        found = steps
    return tuple(found) if 2 <= len(found) <= PLAN_STEPS else ()


class Timeline:
    """One run's tasks, in the model's order, updated from the run's stream."""

    def __init__(self, sink: TimelineSink, allowances: Callable[[str], str | None]) -> None:
        self._sink = sink
        self._allowances = allowances
        self._tasks: dict[str, Task] = {}
        self._said = ""
        """The current turn's text so far (where its plan is)."""
        self._plan: tuple[str, ...] = ()

    @property
    def tasks(self) -> tuple[Task, ...]:
        return tuple(self._tasks.values())

    async def seed(self, batch: Sequence[ToolCallRow]) -> None:
        """A resume: the batch's calls with the decisions taken while the run was paused."""
        seeded: list[Task] = []
        for row in batch:
            status = _SEEDED.get(row.status)
            if status is None:
                continue
            seeded.append(
                Task(
                    row.call_id,
                    row.tool,
                    _short(row.arguments),
                    status,
                    decided_by=row.decided_by if row.needs_approval else None,
                    allowance_by=self._allowances(row.call_id),
                )
            )
        for task in seeded:
            await self._put(task)

    async def waiting(self, row: ToolCallRow, needed: int, link: str | None) -> None:
        """A gated call's card is posted: the task waits, linked to it."""
        task = self._tasks.get(row.call_id)
        if task is None:
            task = Task(row.call_id, row.tool, _short(row.arguments))
        got = (len(row.approvals), needed)
        await self._put(replace(task, status="waiting", approvals=got, card_link=link))

    async def approved(self, row: ToolCallRow, needed: int) -> None:
        """A decision on a waiting call that is not the last it needs (N of M): its count
        moves on. Nothing for a call the timeline does not show waiting."""
        task = self._tasks.get(row.call_id)
        if task is None or task.status != "waiting":
            return
        if task.approvals is not None and task.approvals[0] >= len(row.approvals):
            return  # a later decision's redraw came first: counts only go up
        await self._put(replace(task, approvals=(len(row.approvals), needed)))
        await self._sink.flush()

    async def settled(self, batch: Sequence[ToolCallRow]) -> None:
        """A paused batch closed: its calls as they ended (cancelled, rejected, expired), and,
        where the resume does not go on in this timeline's message (a stream), each approved
        call that was waiting as `approved` (it carries on in the resume's timeline), so the
        message is left with no call waiting."""
        handed_on = self._sink.message() is None
        for row in batch:
            task, status = self._tasks.get(row.call_id), _SEEDED.get(row.status)
            if task is None or status is None:
                continue
            if status != "pending":
                await self._put(replace(task, status=status, decided_by=None))
            elif handed_on and task.status == "waiting" and row.status == "approved":
                await self._put(replace(task, status="approved", decided_by=row.decided_by))

    async def update(self, update: AgentResponseUpdate) -> None:
        match update:
            case TextDelta(text=text):
                self._said = (self._said + text)[-PLAN_TEXT_KEPT:]
            case ToolCallEnded(call=call):
                await self._planned()
                # Pending, not running: the gate has yet to say whether it waits for approval.
                await self._put(Task(call.id, call.name, _short(call.arguments)))
            case ToolApprovalRequest(call_id=call_id):
                await self._change(call_id, status="waiting")
            case ToolCallHeld(call_id=call_id):
                await self._change(
                    call_id, status="pending", allowance_by=self._allowances(call_id)
                )
            case ToolRunning(call_id=call_id, name=name):
                await self._change(
                    call_id, status="in_progress", allowance_by=self._allowances(call_id), name=name
                )
            case ToolResult(call_id=call_id, outcome=None):
                status: TaskStatus = "error" if update.is_error else "complete"
                await self._change(
                    call_id,
                    status=status,
                    seconds=update.seconds,
                    allowance_by=self._allowances(call_id),
                    name=update.name,
                )
            case ToolResult(call_id=call_id, outcome=outcome) if outcome is not None:
                status = _OUTCOMES.get(outcome.kind, "not_run")
                await self._change(call_id, status=status, name=update.name)
            case _:
                pass
        if self._waits_after(update):
            if self._tasks and all(t.final for t in self._tasks.values()):
                await self._sink.rest()  # the model is asked next: no task moves for a while
            else:
                await self._sink.flush()

    async def rest(self) -> None:
        """Show what changed now: the run pauses, it waits for people (`TimelineSink.rest`)."""
        await self._sink.rest()

    def handover(self) -> StoredTimeline | None:
        """What a resume needs to go on in this timeline's message (after `rest`): the message
        and the tasks and plan it shows; None where the medium cannot be gone on in."""
        message = self._sink.message()
        if message is None:
            return None
        tasks = [asdict(task) for task in self._tasks.values()]
        return StoredTimeline(message, json.dumps({"plan": list(self._plan), "tasks": tasks}))

    async def go_on(self, kept: StoredTimeline, batch: Sequence[ToolCallRow]) -> bool:
        """A resume: show the paused part's tasks in its message (`handover`), before the
        batch is seeded. Only if it is this batch's pause (each of its calls is shown there: a
        row kept by an earlier pause is not gone on in); what cannot be read is left out."""
        try:
            shown = json.loads(kept.shown)
        except ValueError:
            return False
        raw = shown.get("tasks") if isinstance(shown, dict) else None
        tasks = [task for task in map(_task, raw if isinstance(raw, list) else []) if task]
        if not batch or not {row.call_id for row in batch} <= {task.call_id for task in tasks}:
            return False
        self._sink.adopt(kept.ts)
        plan = shown.get("plan")
        if isinstance(plan, list) and plan and all(isinstance(step, str) for step in plan):
            self._plan = tuple(plan)
            await self._sink.plan(self._plan)
        for task in tasks:
            await self._put(task)
        return True

    async def close(self) -> None:
        await self._sink.close()

    def _waits_after(self, update: AgentResponseUpdate) -> bool:
        """Whether the run now waits on something outside, so the changes held are shown: a
        tool starts running, or a batch is answered (the model is asked next). Changes in
        between (calls written, gated, answered one after another) go out together."""
        match update:
            case ToolRunning():
                return True
            case ToolResult():
                return not any(t.status in ("pending", "in_progress") for t in self._tasks.values())
            case _:
                return False

    async def _planned(self) -> None:
        """The turn's text is over (its calls come): show the plan it gives, if a new one."""
        said, self._said = self._said, ""
        steps = plan_steps(said) if said else ()
        if steps and steps != self._plan:
            self._plan = steps
            await self._sink.plan(steps)

    async def _change(
        self,
        call_id: str,
        *,
        status: TaskStatus,
        name: str | None = None,
        approvals: tuple[int, int] | None = None,
        seconds: float | None = None,
        allowance_by: str | None = None,
    ) -> None:
        task = self._tasks.get(call_id) or Task(call_id, name or "tool", "")
        changed = replace(
            task,
            status=status,
            approvals=approvals if approvals is not None else task.approvals,
            seconds=seconds if seconds is not None else task.seconds,
            allowance_by=allowance_by or task.allowance_by,
        )
        await self._put(changed)

    async def _put(self, task: Task) -> None:
        if self._tasks.get(task.call_id) == task:
            return
        self._tasks[task.call_id] = task
        await self._sink.show(task)


class PausedTimelines:
    """The timelines of paused runs, still open, by session: a partial decision redraws its
    task there; the session's next run closes it. In this process and bounded (the oldest is
    closed past `limit`): after a restart, or on another replica, a partial decision redraws
    only the card, and the resume's timeline shows the decisions."""

    def __init__(self, limit: int = 256) -> None:
        self._by_session: OrderedDict[str, Timeline] = OrderedDict()
        self._limit = limit

    async def keep(self, session_id: str, timeline: Timeline) -> None:
        """The session's run paused: its timeline shows the waiting calls, and stays open.
        Kept before it is shown: a decision that comes while the waiting calls are being
        sent (a click as soon as the card is posted) resumes the run, whose start closes the
        timeline once that send is done (the sink orders them), instead of missing it and
        leaving it open, showing calls that ran as waiting."""
        self._by_session[session_id] = timeline
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > self._limit:
            _, oldest = self._by_session.popitem(last=False)
            await oldest.close()
        await timeline.rest()

    def get(self, session_id: str) -> Timeline | None:
        return self._by_session.get(session_id)

    async def close(
        self,
        session_id: str,
        batch: Sequence[ToolCallRow] = (),
        *,
        later: Callable[[Coroutine[Any, Any, None]], object] | None = None,
    ) -> StoredTimeline | None:
        """The session's paused timeline is over: its run resumes or another starts, or the
        run was cancelled (`batch`: the calls as they are now, shown before it closes). What a
        resume needs to go on in its message (`Timeline.handover`), if it was here; with
        `later`, a timeline the resume does not go on in is settled by what `later` starts."""
        timeline = self._by_session.pop(session_id, None)
        if timeline is None:
            return None
        if later is not None and timeline.handover() is None:
            # Nothing for the resume to go on in (a stream): settling the message waits on
            # Slack (a hanging edit), the resumed run need not.
            later(_settle(timeline, batch))
            return None
        await _settle(timeline, batch)
        return timeline.handover()


async def _settle(timeline: Timeline, batch: Sequence[ToolCallRow]) -> None:
    """The paused timeline shows `batch` as decided, then is closed."""
    await timeline.settled(batch)
    await timeline.close()


_SEEDED: dict[str, TaskStatus] = {
    "pending": "pending",
    "approved": "pending",
    "rejected": "rejected",
    "expired": "expired",
    "cancelled": "not_run",
}
"""A paused batch's ledger statuses at its resume, as tasks (calls already run are left out)."""

_OUTCOMES: dict[str, TaskStatus] = {
    "rejected": "rejected",
    "expired": "expired",
    "cancelled": "not_run",
    "not_run": "not_run",
    "interrupted": "not_run",
}


def _task(raw: Any) -> Task | None:
    """A task as `Timeline.handover` wrote it; None if it is not one."""
    if not isinstance(raw, dict) or raw.get("status") not in get_args(TaskStatus):
        return None
    approvals = raw.get("approvals")
    try:
        return Task(**{**raw, "approvals": tuple(approvals) if approvals else None})
    except TypeError:
        return None


def _short(arguments: str) -> str:
    """The call's arguments in a line: the values of a flat object ("GET /health", "df -h"),
    else the JSON; whitespace runs folded, cut to `ARGUMENTS_SHOWN`."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and all(isinstance(v, str | int | float) for v in parsed.values()):
        arguments = " ".join(str(v) for v in parsed.values())
    line = " ".join(arguments.split())
    return line if len(line) <= ARGUMENTS_SHOWN else line[: ARGUMENTS_SHOWN - 1] + "…"
