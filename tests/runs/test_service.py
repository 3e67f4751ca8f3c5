"""The run service against a recording output: no Bolt, no HTTP; a real SQLite store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent_core import ChatClientAgent, ChatMessage, tool
from agent_core.messages import Rejected
from agent_core.testing import ScriptedChatClient, Turn, call
from bot.approvals import Approvals
from bot.policy import Policy
from bot.runs import (
    CardCall,
    CardOutcome,
    CardRef,
    Click,
    Notice,
    PostFailed,
    RunService,
    Thread,
)
from bot.runs.cards import LocalRedraws
from bot.runs.context import RunContext
from bot.runs.notices import NotAllowed, RunCancelled, ToolNotRun, ToolRan
from bot.runs.timeline import AssistantStatus, Task
from bot.store import Ruling, SQLiteStore, utc_now
from bot.tasks import TaskSupervisor

ALICE, BOB = "U0ALICE", "U0BOB"
THREAD = Thread("T0TEST", "C0OPS", "1700000001.000100")


@dataclass
class Recording:
    """A `ThreadOutput` that remembers everything it was given."""

    said: list[Notice] = field(default_factory=list)
    told: list[tuple[str, Notice]] = field(default_factory=list)
    streamed: list[str] = field(default_factory=list)
    cards: list[CardCall] = field(default_factory=list)
    updates: list[tuple[CardRef, CardCall, CardOutcome | None]] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    statuses: list[AssistantStatus | None] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    reacted: list[tuple[str, bool]] = field(default_factory=list)
    marks: bool = True
    """What marking a message answers: False, Slack's budget for it is spent (a storm)."""

    async def say(self, thread: Thread, notice: Notice) -> None:
        self.said.append(notice)

    async def tell(self, thread: Thread, user: str, notice: Notice) -> None:
        self.told.append((user, notice))

    async def react(self, thread: Thread, ts: str, on: bool) -> bool:
        self.reacted.append((ts, on))
        return self.marks or not on

    def stream(self, thread: Thread, requester: str | None) -> _Sink:
        return _Sink(self)

    def timeline(self, thread: Thread, requester: str | None) -> _Tasks:
        return _Tasks(self)

    async def status(self, thread: Thread, status: AssistantStatus | None) -> None:
        self.statuses.append(status)

    async def title(self, thread: Thread, request: str) -> None:
        return None

    async def post_card(self, thread: Thread, card: CardCall) -> CardRef | PostFailed:
        self.cards.append(card)
        return CardRef(thread.channel_id, f"card.{len(self.cards)}")

    async def find_card(self, thread: Thread, ledger_id: str) -> CardRef | None:
        return None

    async def update_card(self, ref: CardRef, card: CardCall, outcome: CardOutcome | None) -> None:
        self.updates.append((ref, card, outcome))

    async def upload(self, thread: Thread, filename: str, content: str) -> None:
        return None

    async def permalink(self, ref: CardRef) -> str | None:
        return f"https://example.test/{ref.ts}"

    async def post_root(self, channel: str, requester: str, text: str) -> Thread | PostFailed:
        return Thread(THREAD.team_id, channel, "1700000002.000100")

    def owed(self, thread: Thread, notice: Notice) -> tuple[()]:
        return ()


class _Sink:
    def __init__(self, output: Recording) -> None:
        self.output = output
        self.lost = False

    async def append(self, text: str) -> None:
        self.output.streamed.append(text)

    async def close(self) -> None:
        return None

    async def finish(
        self, session_id: str, answered: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.output.finished.append(session_id)


class _Tasks:
    def __init__(self, output: Recording) -> None:
        self.output = output

    async def show(self, task: Task) -> None:
        self.output.tasks.append(task)

    async def plan(self, steps: tuple[str, ...]) -> None:
        return None

    async def flush(self) -> None:
        return None

    async def rest(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def message(self) -> str | None:
        return None

    def adopt(self, message: str) -> None:
        return None


@tool
def restart(service: str) -> str:
    """Restart a service."""
    return f"restarted {service}"


@dataclass
class World:
    service: RunService
    output: Recording
    store: SQLiteStore
    tasks: TaskSupervisor
    client: ScriptedChatClient
    redraws: LocalRedraws

    async def settle(self) -> None:
        await asyncio.wait_for(self.tasks.wait_idle(), 10)
        await self.redraws.drain()


@asynccontextmanager
async def world(tmp_path: Path, *turns: Turn, policy: str = "") -> AsyncIterator[World]:
    the_policy = Policy.from_toml(policy or '[tools.restart]\napproval = "always"\n')
    client = ScriptedChatClient(*turns)
    tasks = TaskSupervisor()
    output = Recording()
    async with SQLiteStore(tmp_path / "opsgate.db") as store:
        agent = ChatClientAgent(client, tools=[restart], store=store, approval_gate=the_policy.gate)
        ctx = RunContext(
            store=store,
            agent=agent,
            policy=the_policy,
            tools={"restart": restart},
            output=output,
            approvals=Approvals(the_policy),
            tasks=tasks,
            clock=utc_now,
        )
        try:
            service = RunService(ctx)
            redraws = LocalRedraws(service.cards, channel=None)
            yield World(service, output, store, tasks, client, redraws)
        finally:
            await tasks.aclose()


def paused_turns() -> tuple[Turn, Turn]:
    return Turn(tool_calls=[call("c1", "restart", service="web")]), Turn(text="Restarted web.")


async def ask(w: World, text: str = "restart web", user: str = ALICE) -> None:
    await w.service.on_message(
        THREAD, user=user, text=text, message_ts=THREAD.thread_ts, team=THREAD.team_id
    )
    await w.settle()


async def test_a_paused_run_resumes_after_an_approval(tmp_path: Path) -> None:
    async with world(tmp_path, *paused_turns()) as w:
        await ask(w)
        [card] = w.output.cards
        assert card.tool == "restart" and card.requested_by == ALICE

        answer = await w.service.approve(Click(card.ledger_id, BOB, THREAD.team_id))
        assert answer.notice is None
        await w.settle()

        assert any(isinstance(n, ToolRan) and "restarted web" in n.content for n in w.output.said)
        assert "".join(w.output.streamed) == "Restarted web."
        [(_, _, outcome)] = w.output.updates
        assert outcome is not None and outcome.status == "approved" and outcome.decided_by == BOB


async def test_the_requester_may_not_approve_but_may_reject(tmp_path: Path) -> None:
    async with world(tmp_path, *paused_turns()) as w:
        await ask(w)
        [card] = w.output.cards
        refusal = (await w.service.approve(Click(card.ledger_id, ALICE, THREAD.team_id))).notice
        assert isinstance(refusal, NotAllowed) and refusal.refusal.reason == "self_approval"

        await w.service.reject(Click(card.ledger_id, ALICE, THREAD.team_id), "no")
        await w.settle()
        [shown] = [n for n in w.output.said if isinstance(n, ToolNotRun)]
        assert shown.outcome == Rejected("no", ALICE)


async def test_a_click_on_a_decided_card_redraws_it(tmp_path: Path) -> None:
    async with world(tmp_path, *paused_turns()) as w:
        await ask(w)
        [card] = w.output.cards
        # The decision is recorded but the process died before the card was redrawn.
        await w.store.decide(card.ledger_id, "rejected", user_id=BOB, ruling=Ruling(rule="test"))
        assert w.output.updates == []

        notice = (await w.service.approve(Click(card.ledger_id, BOB, THREAD.team_id))).notice
        assert notice is not None and notice.kind == "decision_not_recorded"
        [(ref, _, outcome)] = w.output.updates[:1]
        assert ref.ts == "card.1" and outcome is not None and outcome.status == "rejected"


@pytest.mark.parametrize("marks", [True, False])
async def test_the_queue_item_says_whether_its_message_was_marked(
    tmp_path: Path, marks: bool
) -> None:
    async with world(tmp_path, *paused_turns()) as w:
        w.output.marks = marks
        await ask(w)
        assert w.output.reacted[0] == (THREAD.thread_ts, True)
        [item] = await w.store.queue_items()
        assert item.unmarked is not marks


async def test_recovery_unmarks_only_the_messages_that_were_marked(tmp_path: Path) -> None:
    """Two runs were cut short by a crash after a call began; a storm had spent the mark's
    budget when the second started, so its message went without one. The restart removes
    the first mark only: removing one never made spends a workspace-wide call for nothing."""
    async with world(tmp_path) as w:
        for ts, unmarked in (("1.0", False), ("2.0", True)):
            session = await w.store.get_or_create_session("T0TEST", f"C{ts[0]}", ts)
            await w.store.enqueue(session.id, requester=ALICE, text="restart web", message_ts=ts)
            item = await w.store.claim_queued(f"C{ts[0]}", limit=1)
            assert item is not None
            await w.store.queue_unmarked(item.id, unmarked)
            await w.store.append_messages(session.id, [ChatMessage.user("restart web")])
            status = call("c" + ts[0], "restart", service="web")
            await w.store.append_messages(session.id, [ChatMessage.assistant(None, (status,))])
            await w.store.start_tool_call(session.id, status)
        await w.service.recover()
        await w.settle()
        assert w.output.reacted == [("1.0", False)]


async def test_recovery_redraws_cards_decided_before_a_crash(tmp_path: Path) -> None:
    async with world(tmp_path, *paused_turns()) as w:
        await ask(w)
        [card] = w.output.cards
        await w.store.decide(card.ledger_id, "approved", user_id=BOB, ruling=Ruling(rule="test"))

        await w.service.recover()
        await w.settle()
        redrawn = [o for _, c, o in w.output.updates if c.ledger_id == card.ledger_id]
        assert redrawn and redrawn[0] is not None and redrawn[0].status == "approved"
        # ... and the decided run was resumed.
        assert "".join(w.output.streamed) == "Restarted web."


async def test_cancel_in_the_thread_ends_the_paused_run(tmp_path: Path) -> None:
    async with world(tmp_path, *paused_turns()) as w:
        await ask(w)
        assert len(w.output.cards) == 1
        await ask(w, "cancel", user=BOB)  # anyone in the channel may approve, so may cancel
        assert RunCancelled(BOB) in w.output.said
        [(_, _, outcome)] = w.output.updates
        assert outcome is not None and outcome.status == "cancelled"
        assert w.client.remaining == 1, "a cancelled run never asks the model again"


async def test_two_approvals_needed_resume_only_after_the_second(tmp_path: Path) -> None:
    policy = '[defaults]\nrequired_approvals = 2\n[tools.restart]\napproval = "always"\n'
    async with world(tmp_path, *paused_turns(), policy=policy) as w:
        await ask(w)
        [card] = w.output.cards
        await w.service.approve(Click(card.ledger_id, BOB, THREAD.team_id))
        await w.settle()
        assert w.output.streamed == []
        [(_, progress, outcome)] = w.output.updates
        assert outcome is None and progress.approvals == (BOB,)

        await w.service.approve(Click(card.ledger_id, "U0CAROL", THREAD.team_id))
        await w.settle()
        assert "".join(w.output.streamed) == "Restarted web."
