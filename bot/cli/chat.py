"""`opsgate chat`: the same run service as in Slack, shown in a terminal, approvals at the prompt.

Lets a team try its tools and policy before going to Slack. Runs go through the same queue,
channel options and N-of-M approvals (`required_approvals`) as in Slack; the terminal is the
channel `terminal`. The person at the terminal is both requester and approver, so the Slack
approver rules do not apply here: every decision is still recorded in the ledger and the audit
log, as `terminal:<login>` (a further approval of an N-of-M call names its approver).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import stat
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TextIO

from ..approvals import Action, Allowed, Approvals, Verdict
from ..observability import log_from_settings
from ..policy import GateDecision
from ..runs import (
    CardCall,
    CardOutcome,
    CardRef,
    Click,
    Notice,
    PostFailed,
    RunService,
    Thread,
)
from ..runs.cards import LocalRedraws
from ..runs.context import RunContext
from ..runs.timeline import AssistantStatus, Task
from ..settings import Settings, load_settings
from ..tools import protect_process_environment
from ..wiring import Deps, open_deps
from .notices import card_text, notice_text, plan_text, task_text

__all__ = [
    "Ask",
    "TerminalOutput",
    "run_chat",
    "stdin_prompt",
]

CHANNEL = "terminal"


class TerminalOutput:
    """A `ThreadOutput` printing plain text; posted cards wait in `cards` for the prompt."""

    def __init__(self, out: TextIO, *, tty: bool | None = None) -> None:
        self.out = out
        self.cards: dict[str, CardCall] = {}
        self._posted = 0
        self.tty = out.isatty() if tty is None else tty
        """Task lines are redrawn in place on a terminal, appended otherwise."""
        self.lines = 0
        """Lines printed so far (a task line is redrawn by moving up to it)."""

    def think(self) -> None:
        """Say the model is working, until the first output of the run comes."""
        self._print("(thinking…)")

    def _print(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.out, flush=True)
        self.lines += (text + end).count("\n")

    async def say(self, thread: Thread, notice: Notice) -> None:
        self._print(notice_text(notice))

    async def tell(self, thread: Thread, user: str, notice: Notice) -> None:
        self._print(notice_text(notice))

    async def react(self, thread: Thread, ts: str, on: bool) -> bool:
        return True

    def stream(self, thread: Thread, requester: str | None) -> _Sink:
        return _Sink(self)

    def timeline(self, thread: Thread, requester: str | None) -> _Timeline:
        return _Timeline(self)

    async def status(self, thread: Thread, status: AssistantStatus | None) -> None:
        return None  # the prompt comes back when the run is done

    async def title(self, thread: Thread, request: str) -> None:
        return None

    async def post_card(self, thread: Thread, card: CardCall) -> CardRef | PostFailed:
        self._posted += 1
        self.cards[card.ledger_id] = card
        self._print("\n" + card_text(card))
        return CardRef(thread.channel_id, f"card-{self._posted}")

    async def find_card(self, thread: Thread, ledger_id: str) -> CardRef | None:
        return None  # a terminal keeps no earlier cards

    async def update_card(self, ref: CardRef, card: CardCall, outcome: CardOutcome | None) -> None:
        if outcome is None:
            if card.ledger_id not in self.cards:  # a call an earlier chat left waiting
                self._print("\n" + card_text(card))
            self.cards[card.ledger_id] = card
        else:
            self.cards.pop(card.ledger_id, None)

    async def upload(self, thread: Thread, filename: str, content: str) -> None:
        self._print(f"[{filename}]\n{content}")

    async def permalink(self, ref: CardRef) -> str | None:
        return None

    async def post_root(self, channel: str, requester: str, text: str) -> Thread | PostFailed:
        return PostFailed("the terminal has no channels")

    def owed(self, thread: Thread, notice: Notice) -> tuple[()]:
        return ()  # no outbox: the service says the notice after the commit


class _Sink:
    """One streamed answer, set apart from the tool output above it by its label."""

    def __init__(self, output: TerminalOutput) -> None:
        self.output = output
        self.started = False
        self.lost = False

    async def append(self, text: str) -> None:
        if not self.started:
            self.started = True
            self.output._print(f"\n{ANSWER_LABEL}", end="")
        self.output._print(text, end="")

    async def close(self) -> None:
        self.output._print("")

    async def finish(
        self, session_id: str, answered: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        await self.close()


class _Timeline:
    """One line per task: redrawn in place on a tty (the cursor moves up to it and back),
    a new line for each change otherwise."""

    def __init__(self, output: TerminalOutput) -> None:
        self.output = output
        self._line: dict[str, int] = {}

    async def show(self, task: Task) -> None:
        out, text = self.output, task_text(task)
        at = self._line.get(task.call_id)
        if not out.tty or at is None:
            self._line[task.call_id] = out.lines
            out._print(text)
            return
        up = out.lines - at
        out.out.write(f"\x1b[{up}F\x1b[2K{text}\x1b[{up}E")
        out.out.flush()

    async def plan(self, steps: tuple[str, ...]) -> None:
        self.output._print(plan_text(steps))

    async def flush(self) -> None:
        return None  # every change is printed as it comes

    def message(self) -> str | None:
        return None  # a terminal prints lines: nothing to go on editing

    def adopt(self, message: str) -> None:
        return None

    async def rest(self) -> None:
        return None

    async def close(self) -> None:
        return None


ANSWER_LABEL = "opsgate> "
"""What starts the model's answer, as `you> ` starts the question."""


class _TerminalApprovals(Approvals):
    """The person at the terminal may do everything: they asked, and they decide."""

    async def check(
        self,
        action: Action,
        *,
        channel: str,
        user: str,
        requester: str | None,
        user_team: str | None = None,
        home_team: str | None = None,
        decision: GateDecision | None = None,
    ) -> Verdict:
        # Toward every rule that must approve: the terminal's person decides for all of them.
        counts = () if decision is None else tuple(need.key for need in decision.needs())
        return Allowed("terminal", counts)


def _threaded(input_fn: Callable[[str], str]) -> Ask:
    """An `Ask` on a blocking `input`-like function (tests give one)."""

    async def ask(prompt: str) -> str | None:
        def read() -> str | None:
            try:
                return input_fn(prompt)
            except EOFError:
                return None

        return await asyncio.to_thread(read)

    return ask


async def run_chat(
    *,
    settings: Settings | None = None,
    input_fn: Callable[[str], str] | None = None,
    out: TextIO | None = None,
    deps: Deps | None = None,
    verbose: bool = False,
) -> int:
    """Chat until end of input. Without `input_fn`, lines come from stdin read by a thread of
    its own, so Ctrl-C at a prompt ends at once and stdout stays blocking (`stdin_prompt`).
    Ctrl-C during a run stops the run (its session is closed as `cancel` closes it)."""
    out = out or sys.stdout
    async with contextlib.AsyncExitStack() as stack:
        if deps is None:
            protect_process_environment()
            settings = settings or load_settings(mode="chat")
            # INFO lines would land between a prompt and its answer.
            log_from_settings(settings, verbose=verbose, floor="WARNING")
            deps = await stack.enter_async_context(open_deps(settings))
        ask = (
            _threaded(input_fn)
            if input_fn is not None
            else await stack.enter_async_context(stdin_prompt(out))
        )
        return await _chat(deps, ask, out)
    raise AssertionError("unreachable")  # mypy: the block above returns or raises


def _service(deps: Deps, output: TerminalOutput) -> RunService:
    ctx = RunContext(
        deadlines=deps.deadlines,
        store=deps.store,
        agent=deps.agent,
        policy=deps.policy,
        tools=deps.tools,
        output=output,
        approvals=_TerminalApprovals(deps.policy),
        tasks=deps.tasks,
        clock=deps.clock,
    )
    return RunService(ctx)


_STOP_GRACE = 10.0
"""Seconds a run stopped by Ctrl-C may take to close its session before the chat exits."""


async def _chat(deps: Deps, ask: Ask, out: TextIO) -> int:
    output = TerminalOutput(out)
    service = _service(deps, output)
    # The terminal's sender of the cards' redraws the store writes with each change: drawn
    # here (`update_card`) once the work in flight is done, before the next prompt.
    redraws = LocalRedraws(service.cards, channel=CHANNEL)

    async def settle() -> None:
        await deps.tasks.wait_idle()
        await redraws.drain()

    who = f"terminal:{getpass.getuser()}"
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    thread = Thread(CHANNEL, CHANNEL, started)
    print("OpsGate chat. Risky tool calls ask for approval here. Ctrl-D to quit.", file=out)
    # As `opsgate run` does: runs an earlier chat left going are reported, and calls it left
    # waiting are offered again (below, before the first prompt).
    await service.recover()
    # A terminal keeps no card on screen: recovery redraws only stale cards (what Slack shows
    # already), so the cards of calls still waiting are drawn here again, as prompts.
    for session in await deps.store.sessions_awaiting_approval():
        await service.cards.redraw_batch(session.id)
    await settle()
    sent = 0
    try:
        while True:
            while output.cards:
                if not await _decide_all(service, output, who, ask):
                    print(file=out)
                    return 0
                await settle()
            line = await ask("you> ")
            if line is None:
                print(file=out)
                return 0
            if not line.strip():
                continue
            sent += 1
            output.think()
            await service.on_message(thread, user=who, text=line, message_ts=f"{started}.{sent}")
            await settle()
    except asyncio.CancelledError:  # Ctrl-C: stop the run going, as `cancel` would, then exit
        await _stop_run(deps, service, thread, who)
        raise


async def _stop_run(deps: Deps, service: RunService, thread: Thread, who: str) -> None:
    """Stop this chat's run if one is going, and let it close its session (`Store.stop_run`),
    so the next chat does not find it running. A run waiting for a decision is left waiting:
    the next chat offers its calls again."""
    session = await deps.store.find_session(thread.team_id, thread.channel_id, thread.thread_ts)
    if session is None or not service.ctx.live.cancel(session.id, by=who):
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_STOP_GRACE):
            await deps.tasks.wait_idle()


async def _decide_all(service: RunService, output: TerminalOutput, who: str, ask: Ask) -> bool:
    """Ask for a decision on every waiting card; False at end of input."""
    for ledger_id, card in list(output.cards.items()):
        decider = who
        if card.approvals:  # N-of-M: a further approval is someone else's
            name = await ask("next approver's name: ")
            if name is None:
                return False
            decider = f"terminal:{name.strip() or 'anonymous'}"
        answer = await ask("approve? [y/N, or a reason to reject] ")
        if answer is None:
            return False
        answer = answer.strip()
        click = _click(ledger_id, card, decider)
        if answer.lower() in ("y", "yes"):
            answered = await service.approve(click)
        else:
            reason = answer if answer.lower() not in ("", "n", "no") else None
            answered = await service.reject(click, reason)
        if answered.notice is not None:
            print(notice_text(answered.notice), file=output.out)
    return True


def _click(ledger_id: str, card: CardCall, decider: str) -> Click:
    """The decision on the card as printed: an approval counts only toward the arguments (and
    the preview) the terminal showed, as a click counts only toward the card Slack showed."""
    preview = card.preview.digest if card.preview is not None else None
    return Click(ledger_id, decider, None, digest=card.digest, preview_digest=preview)


# -- the prompt ----------------------------------------------------------------------------------
# The terminal's lines are read in a thread of their own, so that Ctrl-C ends the chat at once
# and stdout stays blocking. A terminal's stdin and stdout are one open file whose status flags
# are shared: watching stdin from the event loop (connect_read_pipe) would set O_NONBLOCK on
# stdout too, and long output would then fail part-way with EAGAIN. So a daemon thread reads the
# raw descriptor with plain blocking os.read (no buffered reader whose lock could stay held at
# exit) and hands lines to the loop; on Ctrl-C the prompt's await is cancelled and the thread,
# blocked in read, ends with the process.

Ask = Callable[[str], Awaitable[str | None]]
"""Show a prompt, return the line typed (without its newline), None at end of input."""


@contextlib.asynccontextmanager
async def stdin_prompt(out: TextIO) -> AsyncIterator[Ask]:
    """An `Ask` on this process's stdin, printing prompts to `out`."""
    fd = sys.stdin.fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)):
        # A regular file (`opsgate chat < script`): reads never block, no reader needed.
        async def ask_file(prompt: str) -> str | None:
            print(prompt, end="", file=out, flush=True)
            line = sys.stdin.readline()
            return line.rstrip("\n") if line else None

        yield ask_file
        return

    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    reader = threading.Thread(
        target=_read_lines, args=(fd, loop, lines), name="stdin reader", daemon=True
    )
    reader.start()

    async def ask(prompt: str) -> str | None:
        print(prompt, end="", file=out, flush=True)
        return await lines.get()

    yield ask


def _read_lines(fd: int, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
    """The reader thread: whole lines (without their newline) into `lines`, then None."""
    pending = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            if pending:
                _hand(loop, lines, pending.decode(errors="replace"))
            _hand(loop, lines, None)
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            _hand(loop, lines, line.decode(errors="replace").rstrip("\r"))


def _hand(
    loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None], line: str | None
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is asking any more
        loop.call_soon_threadsafe(lines.put_nowait, line)
