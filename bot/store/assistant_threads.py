"""Conversations in Slack's AI-app container: which channel each one's user looks at, which
channel its last run started with, and whether its first request has named it.

Kept in the database rather than the process, so that a restart, and every process or replica
on the database, gives a run in a conversation the channel its user moved to last (the run
service decides which channels count: `bot.runs.context`). One small row per conversation.
"""

from __future__ import annotations

from .core import StoreCore
from .models import AssistantThread

__all__ = ["AssistantThreads"]

_KEY = "team_id = :team AND channel_id = :channel AND thread_ts = :ts"


class AssistantThreads(StoreCore):
    async def note_assistant_thread(
        self, team_id: str, channel_id: str, thread_ts: str, *, viewing: str | None
    ) -> None:
        """The conversation (a DM thread) is in the AI-app container and its user now looks at
        `viewing` (None: at no channel that counts); created on first use, the last writer
        wins. Seen by every store on the database, and after a restart."""
        async with self._db.transaction("note_assistant_thread") as tx:
            await tx.execute(
                "INSERT INTO assistant_threads (team_id, channel_id, thread_ts, "
                "viewing_channel, updated_at) VALUES (:team, :channel, :ts, :viewing, :now) "
                "ON CONFLICT (team_id, channel_id, thread_ts) DO UPDATE SET "
                "viewing_channel = excluded.viewing_channel, updated_at = excluded.updated_at",
                {
                    "team": team_id,
                    "channel": channel_id,
                    "ts": thread_ts,
                    "viewing": viewing,
                    "now": self._now(),
                },
            )

    async def assistant_thread(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> AssistantThread | None:
        """The container conversation of that thread; None for a thread outside it."""
        async with self._db.reading("assistant_thread") as tx:
            row = await tx.fetch_one(
                f"SELECT * FROM assistant_threads WHERE {_KEY}",
                {"team": team_id, "channel": channel_id, "ts": thread_ts},
            )
        if row is None:
            return None
        data = dict(row)
        for name in ("titled_at", "updated_at"):
            data[name] = self._db.time_out(data[name])
        return AssistantThread.model_validate(data)

    async def pin_assistant_run(
        self, team_id: str, channel_id: str, thread_ts: str, *, run_channel: str
    ) -> bool:
        """A run of the conversation starts with `run_channel`'s policy (its resume reads it
        back). True for the first run of the conversation only, across all stores: it names
        the conversation. A thread outside the container: nothing is written, False."""
        key = {"team": team_id, "channel": channel_id, "ts": thread_ts, "now": self._now()}
        async with self._db.transaction("pin_assistant_run") as tx:
            titled = await tx.execute(
                f"UPDATE assistant_threads SET titled_at = :now WHERE {_KEY} AND titled_at IS NULL",
                key,
            )
            await tx.execute(
                f"UPDATE assistant_threads SET run_channel = :run, updated_at = :now WHERE {_KEY}",
                {**key, "run": run_channel},
            )
        return titled == 1
