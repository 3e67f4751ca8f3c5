"""The AI-app container (Slack's agent messaging experience, and the older split view): which
channel each conversation there is looking at, the prompts it offers at the start, and its
title from the first request (split view only).

A conversation in the container is a DM thread and a session like any other thread: the same
approvals, cards and audit. What the container adds is context: the user tells Slack which
channel they are looking at, and a run in that conversation then gets that channel's
instructions and tool set (`run_start`), if the bot acts in that channel at all. Approvals
stay those of the thread where the cards are posted.

The context is kept in the store (`Store.note_assistant_thread`), so it holds across restarts
and across the processes sharing a database. A run pins the channel it started with, and its
resume uses the same one (a resume offered other tools would answer a stored call "unknown").
"""

from __future__ import annotations

from dataclasses import dataclass

from .context import RunContext
from .output import Thread

__all__ = ["WHOLE_DM", "Container", "RunStart"]


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
