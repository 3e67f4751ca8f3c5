"""The AI-app container (Slack's agent split view): which channel each conversation there is
looking at, the prompts it offers at the start, and its title from the first request.

A conversation in the container is a DM thread and a session like any other thread: the same
approvals, cards and audit. What the container adds is context: the user tells Slack which
channel they are looking at, and a run in that conversation then gets that channel's
instructions and tool set (`run_channel`), if the bot acts in that channel at all. Approvals
stay those of the thread where the cards are posted.

The context is kept in this process (bounded): after a restart a conversation has its DM's own
policy until the user moves to a channel again. A run pins the channel it started with, and its
resume uses the same one (a resume offered other tools would answer a stored call "unknown").
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

from ..policy import Policy
from .output import Thread

__all__ = ["Container"]

K = TypeVar("K")
V = TypeVar("V")


class Container:
    """What the service knows about conversations in the AI-app container."""

    def __init__(self, policy: Policy, limit: int = 10_000) -> None:
        self.policy = policy
        self._limit = limit
        self._viewing: OrderedDict[Thread, str] = OrderedDict()
        self._pinned: OrderedDict[str, str] = OrderedDict()
        self._titled: OrderedDict[Thread, None] = OrderedDict()
        self._threads: OrderedDict[Thread, None] = OrderedDict()

    @property
    def suggested_prompts(self) -> tuple[str, ...]:
        """`[defaults] suggested_prompts`, at most four."""
        return self.policy.defaults.suggested_prompts

    def started(self, thread: Thread, viewing: str | None) -> tuple[str, ...]:
        """A conversation opened in the container (looking at `viewing`, when Slack says):
        the prompts to offer."""
        self._keep(self._threads, thread, None)
        self.viewing(thread, viewing)
        return self.suggested_prompts

    def viewing(self, thread: Thread, channel: str | None) -> None:
        """The user of a container conversation now looks at `channel` (None: no channel)."""
        self._keep(self._threads, thread, None)
        if channel and channel != thread.channel_id and self.policy.allows_channel(channel):
            self._keep(self._viewing, thread, channel)
        else:
            self._viewing.pop(thread, None)

    def run_channel(self, thread: Thread, session_id: str) -> str:
        """The channel whose instructions and tools a new run of the thread gets: the one its
        user looks at in the container, else the thread's own. Pinned for the resume."""
        channel = self._viewing.get(thread, thread.channel_id)
        self._keep(self._pinned, session_id, channel)
        return channel

    def resume_channel(self, thread: Thread, session_id: str) -> str:
        """The channel the paused run started with (the thread's own when not known)."""
        return self._pinned.get(session_id, thread.channel_id)

    def title_once(self, thread: Thread) -> bool:
        """True the first time a container conversation's request is seen: it names the
        conversation. Threads outside the container are never titled."""
        if thread not in self._threads or thread in self._titled:
            return False
        self._keep(self._titled, thread, None)
        return True

    def _keep(self, into: OrderedDict[K, V], key: K, value: V) -> None:
        into[key] = value
        into.move_to_end(key)
        while len(into) > self._limit:
            into.popitem(last=False)
