"""Feedback votes: one per person per answer, the latest counts.

A click on the feedback buttons is a vote of its person on one answer (the session and the
answer's message); a row here holds the vote as it stands. Clicking the same value again
changes nothing, another value replaces the vote. The `feedback` audit row is written with the
change, in the same transaction, so the log lists each vote and each change of mind once,
whichever process or replica took the click.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .core import StoreCore
from .errors import StoreError

__all__ = ["FeedbackVotes", "Vote", "VoteValue"]

VoteValue = Literal["good", "bad"]


@dataclass(frozen=True, slots=True)
class Vote:
    """What a click did: `counted` is False for a repeat of the vote as it stands; `replaces`
    is the value a change of mind took back (None for a first vote)."""

    value: VoteValue
    counted: bool
    replaces: VoteValue | None


def _value(raw: object) -> VoteValue:
    if raw == "good" or raw == "bad":
        return raw
    raise StoreError(f"a feedback vote holds {raw!r}, neither 'good' nor 'bad'")


class FeedbackVotes(StoreCore):
    """The feedback operations of `bot.store.Store`."""

    async def vote(self, session_id: str, message_ts: str, *, user: str, value: VoteValue) -> Vote:
        """Record `user`'s vote on the answer; audited (`feedback`) only when it changed.

        Insert first (a person's first vote), else lock the row and compare: two clicks of
        one person at once, on two replicas, make one vote, as the insert of the second waits
        for the first's commit and then finds its row."""
        key = {"session": session_id, "ts": message_ts, "user": user}
        async with self._db.transaction("vote") as tx:
            added = await tx.execute(
                "INSERT INTO feedback_votes (session_id, message_ts, user_id, value) "
                "VALUES (:session, :ts, :user, :value) "
                "ON CONFLICT (session_id, message_ts, user_id) DO NOTHING",
                key | {"value": value},
            )
            replaces: VoteValue | None = None
            if added != 1:
                stood = await tx.fetch_value(
                    "SELECT value FROM feedback_votes WHERE session_id = :session "
                    "AND message_ts = :ts AND user_id = :user" + self._db.for_update,
                    key,
                )
                replaces = _value(stood)
                if replaces == value:
                    return Vote(value, counted=False, replaces=None)
                await tx.execute(
                    "UPDATE feedback_votes SET value = :value "
                    "WHERE session_id = :session AND message_ts = :ts AND user_id = :user",
                    key | {"value": value},
                )
            details: dict[str, str] = {"value": value, "message_ts": message_ts}
            if replaces is not None:
                details["replaces"] = replaces
            await self._write_audit(
                tx, "feedback", actor=user, session_id=session_id, details=details
            )
        return Vote(value, counted=True, replaces=replaces)
