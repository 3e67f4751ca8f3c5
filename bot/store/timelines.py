"""The message a paused run's timeline is shown in, kept with the run (`run_timelines`).

Where the timeline is one posted message edited in place (Slack refused streaming), its resume
edits that message too, instead of posting a second one that leaves the first "waiting"
forever. The resume may come after a restart, or on another replica: so the message's id and
what it shows (`shown`, the run layer's own text: its tasks and plan) are a row keyed by the
session, written at the pause and dropped when the run ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from .core import StoreCore

__all__ = ["RunTimelines", "StoredTimeline"]


@dataclass(frozen=True, slots=True)
class StoredTimeline:
    """A paused run's timeline: its message (`ts`) and what it shows (opaque to the store)."""

    ts: str
    shown: str


class RunTimelines(StoreCore):
    """The timeline operations of `bot.store.Store`."""

    async def keep_timeline(self, session_id: str, ts: str, shown: str) -> None:
        """The paused run's timeline is message `ts`, showing `shown` (replaces what was kept)."""
        async with self._db.transaction("keep_timeline") as tx:
            await tx.execute(
                "INSERT INTO run_timelines (session_id, ts, shown) VALUES (:id, :ts, :shown) "
                "ON CONFLICT (session_id) DO UPDATE SET ts = excluded.ts, shown = excluded.shown",
                {"id": session_id, "ts": ts, "shown": shown},
            )

    async def kept_timeline(self, session_id: str) -> StoredTimeline | None:
        """The paused run's timeline message, for its resume to edit; None if none was kept."""
        async with self._db.reading("kept_timeline") as tx:
            row = await tx.fetch_one(
                "SELECT ts, shown FROM run_timelines WHERE session_id = :id", {"id": session_id}
            )
        return None if row is None else StoredTimeline(str(row["ts"]), str(row["shown"]))

    async def drop_timeline(self, session_id: str) -> None:
        """The run ended: its timeline message is no longer continued."""
        async with self._db.transaction("drop_timeline") as tx:
            await tx.execute("DELETE FROM run_timelines WHERE session_id = :id", {"id": session_id})
