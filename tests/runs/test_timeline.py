"""The run's timeline model: one task per call, statuses in the model's order, a resume seeded
from the ledger, and the allowance uses it reads kept bounded."""

from __future__ import annotations

from agent_core import ToolApprovalRequest, ToolCallEnded, ToolCallHeld, ToolResult
from agent_core.messages import ToolCall
from agent_core.outcomes import Expired
from bot.cli.notices import task_text
from bot.runs.timeline import AllowanceUses, Task, Timeline


class _Shown:
    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.closed = 0

    async def show(self, task: Task) -> None:
        self.tasks.append(task)

    async def close(self) -> None:
        self.closed += 1


def _statuses(shown: _Shown, call_id: str) -> list[str]:
    return [t.status for t in shown.tasks if t.call_id == call_id]


async def test_an_unpaused_batch_runs_in_the_models_order() -> None:
    shown, uses = _Shown(), AllowanceUses()
    timeline = Timeline(shown, uses.granted_by)
    for n in (1, 2, 3):
        await timeline.update(ToolCallEnded(ToolCall(id=f"c{n}", name="echo", arguments="{}")))
    uses.note("c2", "U0ANA")
    await timeline.update(ToolResult("c1", "echo", "ok", seconds=0.08))
    await timeline.update(ToolResult("c2", "echo", "boom", is_error=True, seconds=1.5))
    await timeline.update(ToolResult("c3", "echo", "Expired", outcome=Expired("1h")))
    assert _statuses(shown, "c1") == ["pending", "complete"]
    assert _statuses(shown, "c2") == ["pending", "in_progress", "error"]
    assert _statuses(shown, "c3") == ["pending", "in_progress", "expired"]
    [failed] = [t for t in shown.tasks if t.call_id == "c2" and t.status == "error"]
    assert (failed.seconds, failed.allowance_by) == (1.5, "U0ANA")


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
