"""The run's timeline model: one task per call, statuses in the model's order, a resume seeded
from the ledger, and the allowance uses it reads kept bounded."""

from __future__ import annotations

from datetime import UTC, datetime

from agent_core import (
    TextDelta,
    ToolApprovalRequest,
    ToolCallEnded,
    ToolCallHeld,
    ToolResult,
    ToolRunning,
)
from agent_core.messages import Expired, ToolCall
from bot.cli.notices import plan_text, task_text
from bot.runs.timeline import AllowanceUses, Task, Timeline, plan_steps
from bot.store import ToolCallRow


class _Shown:
    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.plans: list[tuple[str, ...]] = []
        self.flushed: list[int] = []
        """How many task changes had been shown at each flush."""
        self.closed = 0
        self.rested: list[int] = []
        """How many task changes had been shown at each rest (no task moving)."""

    async def show(self, task: Task) -> None:
        self.tasks.append(task)

    async def plan(self, steps: tuple[str, ...]) -> None:
        self.plans.append(steps)

    async def flush(self) -> None:
        self.flushed.append(len(self.tasks))

    async def rest(self) -> None:
        self.rested.append(len(self.tasks))
        await self.flush()

    async def close(self) -> None:
        self.closed += 1

    def message(self) -> str | None:
        return None

    def adopt(self, message: str) -> None:
        return None


def _statuses(shown: _Shown, call_id: str) -> list[str]:
    return [t.status for t in shown.tasks if t.call_id == call_id]


async def test_a_task_is_in_progress_when_its_tool_starts_running() -> None:
    shown, uses = _Shown(), AllowanceUses()
    timeline = Timeline(shown, uses.granted_by)
    for n in (1, 2, 3):
        await timeline.update(ToolCallEnded(ToolCall(id=f"c{n}", name="echo", arguments="{}")))
    uses.note("c2", "U0ANA")
    await timeline.update(ToolRunning("c1", "echo"))
    await timeline.update(ToolResult("c1", "echo", "ok", seconds=0.08))
    # c2 is not shown running before its tool starts (the model's order is not a guess).
    assert _statuses(shown, "c2") == ["pending"]
    await timeline.update(ToolRunning("c2", "echo"))
    await timeline.update(ToolResult("c2", "echo", "boom", is_error=True, seconds=1.5))
    await timeline.update(ToolResult("c3", "echo", "Expired", outcome=Expired("1h")))
    assert _statuses(shown, "c1") == ["pending", "in_progress", "complete"]
    assert _statuses(shown, "c2") == ["pending", "in_progress", "error"]
    assert _statuses(shown, "c3") == ["pending", "expired"]
    [failed] = [t for t in shown.tasks if t.call_id == "c2" and t.status == "error"]
    assert (failed.seconds, failed.allowance_by) == (1.5, "U0ANA")


async def test_the_timeline_rests_once_every_call_of_the_batch_is_answered() -> None:
    """The model is asked next: no task moves, so the sink may end what only lasts while
    tasks move (Slack's stream), not in the burst of the run's last words."""
    shown = _Shown()
    timeline = Timeline(shown, lambda call_id: None)
    for n in (1, 2):
        await timeline.update(ToolCallEnded(ToolCall(id=f"c{n}", name="echo", arguments="{}")))
    await timeline.update(ToolRunning("c1", "echo"))
    await timeline.update(ToolResult("c1", "echo", "ok", seconds=0.1))
    assert shown.rested == []  # c2 is still to run
    await timeline.update(ToolRunning("c2", "echo"))
    await timeline.update(ToolResult("c2", "echo", "ok", seconds=0.1))
    assert shown.rested == [len(shown.tasks)]


async def test_a_paused_batch_waits_and_nothing_runs_before_the_decisions() -> None:
    shown = _Shown()
    timeline = Timeline(shown, lambda call_id: None)
    await timeline.update(ToolCallEnded(ToolCall(id="a", name="echo", arguments='{"t": "x"}')))
    await timeline.update(ToolCallEnded(ToolCall(id="b", name="run_command", arguments="{}")))
    await timeline.update(ToolApprovalRequest("b", "run_command", {}, "", "d1"))
    await timeline.update(ToolCallHeld("a", "echo", {"t": "x"}))
    assert [t.status for t in timeline.tasks] == ["pending", "waiting"]
    assert timeline.tasks[0].arguments == "x"
    await timeline.close()
    assert shown.closed == 1


def test_allowance_uses_are_bounded() -> None:
    uses = AllowanceUses(limit=2)
    for n in range(5):
        uses.note(f"c{n}", f"U{n}")
    assert [uses.granted_by(f"c{n}") for n in range(5)] == [None, None, None, "U3", "U4"]


def test_a_task_line_in_the_terminal_shows_no_control_characters() -> None:
    task = Task("c1", "run_command", "echo \x1b[2Jgone\x07", "complete", seconds=0.012)
    line = task_text(task)
    assert line == "[x] run_command echo ?[2Jgone?: done in 12 ms"
    waiting = Task("c2", "run_command", "df -h", "waiting", approvals=(1, 2))
    assert task_text(waiting) == "[?] run_command df -h: waiting for approval (1 of 2)"


def test_a_plan_is_a_numbered_list_of_two_steps_or_more() -> None:
    text = (
        "I will:\n1. Check the disk on web-1\n   (df -h)\n2) Clear the cache\n3. Check again\n"
        "That's it."
    )
    assert plan_steps(text) == ("Check the disk on web-1", "Clear the cache", "Check again")
    assert plan_steps("1. Only one step") == ()
    assert plan_steps("Let me check the disk.") == ()
    assert plan_steps("2. starts late\n3. and goes on") == ()
    # A second list in the same text is the plan; numbering that skips ends the list.
    assert plan_steps("1. a\n2. b\nthen\n1. c\n2. d\n4. skipped") == ("c", "d")
    assert plan_steps("\n".join(f"{n}. step" for n in range(1, 20))) == ()


async def test_the_plan_before_a_turns_calls_is_shown_once() -> None:
    shown = _Shown()
    timeline = Timeline(shown, lambda call_id: None)
    await timeline.update(TextDelta("Plan:\n1. Check the disk\n2. Cle"))
    await timeline.update(TextDelta("ar the cache\n"))
    await timeline.update(ToolCallEnded(ToolCall(id="a", name="echo", arguments="{}")))
    await timeline.update(ToolCallEnded(ToolCall(id="b", name="echo", arguments="{}")))
    assert shown.plans == [("Check the disk", "Clear the cache")]
    # The next turn says the same plan again: not shown twice; a final answer is no plan.
    await timeline.update(ToolResult("a", "echo", "ok"))
    await timeline.update(TextDelta("1. Check the disk\n2. Clear the cache"))
    await timeline.update(ToolCallEnded(ToolCall(id="c", name="echo", arguments="{}")))
    await timeline.update(TextDelta("Done:\n1. disk checked\n2. cache cleared"))
    assert shown.plans == [("Check the disk", "Clear the cache")]


def test_a_plan_line_in_the_terminal_shows_no_control_characters() -> None:
    line = plan_text(("check \x1b[2Jthe disk", "clear\nthe cache"))
    assert line == "plan: 1. check ?[2Jthe disk · 2. clear the cache"


async def test_changes_are_flushed_when_the_run_waits() -> None:
    shown = _Shown()
    timeline = Timeline(shown, lambda call_id: None)
    for name in ("a", "b", "c"):
        await timeline.update(ToolCallEnded(ToolCall(id=name, name="echo", arguments="{}")))
    assert shown.flushed == []  # the calls are being written: nothing waits yet
    await timeline.update(ToolRunning("a", "echo"))
    assert shown.flushed == [4]  # a tool starts: the three pending and a's start go out
    await timeline.update(ToolResult("a", "echo", "ok"))
    await timeline.update(ToolResult("b", "echo", "Error: unknown tool", is_error=True))
    assert shown.flushed == [4]  # c is still to run: its start flushes these with it
    await timeline.update(ToolRunning("c", "echo"))
    await timeline.update(ToolResult("c", "echo", "ok"))
    assert shown.flushed == [4, 7, 8]  # the batch answered: the model is asked next


async def test_a_waiting_count_only_goes_up() -> None:
    def row(approvals: tuple[str, ...]) -> ToolCallRow:
        now = datetime(2026, 1, 1, tzinfo=UTC)
        return ToolCallRow.model_validate(
            {
                "id": "L1",
                "session_id": "S1",
                "batch_id": "B1",
                "message_seq": 0,
                "position": 0,
                "call_id": "b",
                "name": "run_command",
                "arguments": "{}",
                "digest": "d1",
                "needs_approval": True,
                "status": "pending",
                "approvals": approvals,
                "created_at": now,
            }
        )

    shown = _Shown()
    timeline = Timeline(shown, lambda call_id: None)
    await timeline.update(ToolCallEnded(ToolCall(id="b", name="run_command", arguments="{}")))
    await timeline.waiting(row(()), 3, None)
    await timeline.approved(row(("U1", "U2")), 3)
    await timeline.approved(row(("U1",)), 3)  # the earlier decision's redraw, late
    assert [t.approvals for t in shown.tasks if t.status == "waiting"] == [(0, 3), (2, 3)]
    assert shown.flushed == [3]


class _Posted(_Shown):
    """A sink shown in one posted message (Slack without streaming): a resume can go on in it."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__()
        self.posted = message
        self.adopted: list[str] = []

    def message(self) -> str | None:
        return self.posted

    def adopt(self, message: str) -> None:
        self.adopted.append(message)


def _row(call_id: str, status: str = "approved") -> ToolCallRow:
    return ToolCallRow.model_validate(
        {
            "id": f"L{call_id}",
            "session_id": "S1",
            "batch_id": "B1",
            "message_seq": 0,
            "position": 0,
            "call_id": call_id,
            "name": "run_command",
            "arguments": "{}",
            "digest": "d1",
            "needs_approval": True,
            "status": status,
            "decided_by": "U0BOB",
            "created_at": datetime(2026, 1, 1, tzinfo=UTC),
        }
    )


async def test_a_resume_goes_on_in_the_paused_timelines_message_with_its_tasks() -> None:
    paused = Timeline(_Posted("1700.1"), lambda call_id: None)
    await paused.update(TextDelta("1. look\n2. fix\n"))
    await paused.update(ToolCallEnded(ToolCall(id="a", name="echo", arguments="{}")))
    await paused.update(ToolRunning("a", "echo"))
    await paused.update(ToolResult("a", "echo", "ok", seconds=0.5))
    await paused.update(ToolCallEnded(ToolCall(id="b", name="run_command", arguments="{}")))
    await paused.waiting(_row("b", "pending"), 2, "https://example.test/card")
    kept = paused.handover()
    assert kept is not None and kept.ts == "1700.1"

    sink = _Posted()
    resumed = Timeline(sink, lambda call_id: None)
    assert await resumed.go_on(kept, [_row("b")])
    assert sink.adopted == ["1700.1"] and sink.plans == [("look", "fix")]
    a, b = resumed.tasks
    assert (a.status, a.seconds) == ("complete", 0.5)
    assert (b.status, b.approvals, b.card_link) == ("waiting", (0, 2), "https://example.test/card")
    await resumed.seed([_row("b")])
    assert resumed.tasks[1].status == "pending" and resumed.tasks[1].decided_by == "U0BOB"


async def test_a_kept_timeline_of_another_batch_or_a_stream_is_not_gone_on_in() -> None:
    streamed = Timeline(_Posted(None), lambda call_id: None)
    await streamed.update(ToolCallEnded(ToolCall(id="b", name="run_command", arguments="{}")))
    assert streamed.handover() is None  # a stream: the resume streams its own
    paused = Timeline(_Posted("1700.1"), lambda call_id: None)
    await paused.update(ToolCallEnded(ToolCall(id="b", name="run_command", arguments="{}")))
    kept = paused.handover()
    assert kept is not None
    sink = _Posted()
    later = Timeline(sink, lambda call_id: None)
    assert not await later.go_on(kept, [_row("c")])  # an earlier pause's row: another batch
    assert sink.adopted == [] and later.tasks == ()
