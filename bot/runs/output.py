"""`ThreadOutput`: everything the run service says, as typed values, and where it says it.

The run service (`bot.runs.service`) never talks to Slack or a terminal. It writes to a
`ThreadOutput`, giving it a typed `Notice` (what happened, with its data) or a card view model
(`bot.runs.views`). Each implementation turns those into its medium:

- `bot.slack` posts mrkdwn (through `bot.slack.mrkdwn`, the one escaping path) and Block Kit;
- `bot.cli.chat` prints plain text and asks for decisions at the prompt.

Contract, for implementers:

- Methods never raise for a failed delivery (a Slack error, a closed terminal): they log and
  carry on, so a run's clean-up always finishes. `post_card` and `post_root` say a failure with
  `PostFailed` (the service then tells the thread, or the user); `permalink` returns None.
- `say` is seen by everyone in the thread; `tell` only by `user`, and only when `user` is a
  person (an integration's bot id gets nothing).
- `stream` returns a `TextSink` for one streamed answer: `append` pieces, then `close` (the
  service always closes it, also on errors; closing twice is harmless). The run's final answer
  is closed with `finish(session_id)` instead, so the output can offer feedback on it.
- `timeline` returns a `TimelineSink` for one run's tool calls (`bot.runs.timeline`): each
  changed `Task` is `show`n, then the sink is closed (the run ended or paused).
- `status` sets (or, with None, clears) the thread's "is working" line; it never blocks or
  fails the run.
- Notices carry raw text (model output, tool output, error messages): the renderer escapes it.
- `ToolRan` output that is too long to show inline is attached as a file by the renderer. An
  output may show it at the head of the run's next answer instead of as a message of its own
  (Slack does while the channel's posts are spent: `bot.slack.output.HeldOutputs`); anything
  else said in the thread, a card, or a status other than working shows it first.
- `post_card` attaches the arguments as a file when the card must cut them, and marks the card
  with its ledger id so that `find_card` can find it again after a crash.

Match on `notice.kind` (or the class) to render; every notice is a frozen dataclass.
See `docs/architecture.md` ("Layers", "Data path of one request").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .notices import Notice
from .timeline import AssistantStatus, TimelineSink
from .views import CardCall, CardOutcome, CardRef

if TYPE_CHECKING:
    from ..store import OutboxEntry, SessionRow

__all__ = [
    "PostFailed",
    "TextSink",
    "Thread",
    "ThreadOutput",
]


@dataclass(frozen=True, slots=True)
class Thread:
    """Where a conversation lives: one thread is one agent session."""

    team_id: str
    channel_id: str
    thread_ts: str

    @classmethod
    def of(cls, session: SessionRow) -> Thread:
        """The thread of a stored session: the one way from a row to its thread (a call's row
        goes through its session: `bot.runs.context.thread_of`)."""
        return cls(session.team_id, session.channel_id, session.thread_ts)


@dataclass(frozen=True, slots=True)
class PostFailed:
    """A post did not happen; `error` names why in the medium's words (e.g. "not_in_channel")."""

    error: str


class TextSink(Protocol):
    """One streamed answer being written."""

    @property
    def lost(self) -> bool:
        """The medium refused the end of the answer (past the rate-limit deadline, or a real
        error): the thread does not show it whole, so the run is not counted completed."""
        ...

    async def append(self, text: str) -> None: ...

    async def close(self) -> None:
        """Finish the answer; idempotent."""
        ...

    async def finish(
        self, session_id: str, answered: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Finish the answer as the run's last word (feedback is offered on it); idempotent,
        and a no-op after `close`. `answered` is awaited once what the thread still lacks of
        the answer is durable, before it is shown (the run may end then: a kill meanwhile
        loses nothing)."""
        ...


class ThreadOutput(Protocol):
    """Where the run service's words go. See the module docstring for the contract."""

    async def say(self, thread: Thread, notice: Notice) -> None:
        """Post `notice` in the thread, for everyone there."""
        ...

    async def tell(self, thread: Thread, user: str, notice: Notice) -> None:
        """Show `notice` to `user` alone, in the thread; nothing when `user` is not a person."""
        ...

    async def react(self, thread: Thread, ts: str, on: bool) -> bool:
        """Mark (`on`) or unmark message `ts` as being worked on. False: a mark was not made
        (Slack's budget for it is spent, a storm), so there is nothing to unmark."""
        ...

    def stream(self, thread: Thread, requester: str | None) -> TextSink:
        """Start a streamed answer addressed to `requester` (None or a bot: a plain post)."""
        ...

    def timeline(self, thread: Thread, requester: str | None) -> TimelineSink:
        """Start showing one run's tool calls as tasks (addressed like `stream`)."""
        ...

    async def status(self, thread: Thread, status: AssistantStatus | None) -> None:
        """Show what the run is doing under the thread; None clears it."""
        ...

    async def title(self, thread: Thread, request: str) -> None:
        """Name a conversation (the AI-app container's) after its first request (raw text)."""
        ...

    async def post_card(self, thread: Thread, card: CardCall) -> CardRef | PostFailed:
        """Post a pending approval card with its buttons (or prompt)."""
        ...

    async def find_card(self, thread: Thread, ledger_id: str) -> CardRef | None:
        """The card already posted in the thread for call `ledger_id`, or None: a process
        killed while posting it never stored where it went (an orphan with live buttons)."""
        ...

    async def update_card(
        self, ref: CardRef, card: CardCall, outcome: CardOutcome | None
    ) -> PostFailed | None:
        """Redraw a card: pending (`outcome` None: buttons, N-of-M progress) or decided.
        `PostFailed` when the redraw did not happen (start-up tries again)."""
        ...

    async def upload(self, thread: Thread, filename: str, content: str) -> None:
        """Attach `content` to the thread as a file."""
        ...

    async def permalink(self, ref: CardRef) -> str | None:
        """A link to the card, or None when there is none."""
        ...

    async def post_root(self, channel: str, requester: str, text: str) -> Thread | PostFailed:
        """Post `requester`'s request as a new thread root in `channel` (`/opsgate <request>`).
        The returned thread has the channel's team."""
        ...

    def owed(self, thread: Thread, notice: Notice) -> Sequence[OutboxEntry]:
        """The outbox rows that would post `notice`, for the store to put in the transaction of
        the change the notice reports (both commit, or neither); empty when this output keeps
        no outbox, and the caller says the notice after the commit instead."""
        ...
