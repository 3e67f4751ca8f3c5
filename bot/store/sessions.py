"""Sessions (one per Slack thread), their named run-state transitions, their history and its
compaction summaries, and the small rows kept per thread beside them.

Callers never write a state directly: each step of a run's life has a name here, and each is a
conditional update, so that of any number of concurrent claimers (tasks, processes, replicas)
exactly one wins. `docs/architecture.md` ("Run states") draws the machine. Summaries are
append-only like the history: a later one reaches further, and the messages stay stored.

Beside a session, keyed by its thread: the message a paused run's timeline is shown in
(`RunTimelines`), the conversation's place in Slack's AI-app container (`AssistantThreads`),
and the people's votes on its answers (`FeedbackVotes`). Each is a row in the database rather
than process state, so a restart or another replica sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from agent_core.messages import ChatMessage
from agent_core.sessions import StoredContext, Summary

from .core import StoreCore
from .errors import InvalidTransition, StoreError, UnknownSession
from .models import AssistantThread, RunState, SessionRow
from .rules import check_states, new_id

__all__ = [
    "AssistantThreads",
    "FeedbackVotes",
    "RunTimelines",
    "Sessions",
    "StoredTimeline",
    "Vote",
    "VoteValue",
]

_OWNED: frozenset[str] = frozenset({"running", "resuming"})
"""States in which a replica's run owns the session (recovery leaves live owners alone)."""

_BY_THREAD = (
    "SELECT * FROM sessions WHERE team_id = :team AND channel_id = :channel AND thread_ts = :thread"
)


class Sessions(StoreCore):
    async def get_or_create_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow:
        """The session of a Slack thread, created `idle` on first use; concurrent callers from
        any number of stores get the same one."""
        key = {"team": team_id, "channel": channel_id, "thread": thread_ts}
        async with self._db.transaction("get_or_create_session") as tx:
            await tx.execute(
                "INSERT INTO sessions (id, team_id, channel_id, thread_ts, state, created_at, "
                "updated_at) VALUES (:id, :team, :channel, :thread, 'idle', :now, :now) "
                "ON CONFLICT (team_id, channel_id, thread_ts) DO NOTHING",
                {**key, "id": new_id(), "now": self._now()},
            )
            row = await tx.fetch_one(_BY_THREAD, key)
        return self._session_model(row)

    async def get_session(self, session_id: str) -> SessionRow | None:
        async with self._db.reading("get_session") as tx:
            row = await tx.fetch_one("SELECT * FROM sessions WHERE id = :id", {"id": session_id})
        return None if row is None else self._session_model(row)

    async def find_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow | None:
        async with self._db.reading("find_session") as tx:
            row = await tx.fetch_one(
                _BY_THREAD, {"team": team_id, "channel": channel_id, "thread": thread_ts}
            )
        return None if row is None else self._session_model(row)

    async def set_requester(self, session_id: str, user_id: str) -> None:
        """Who asked for the current run; the actor of its approval requests. `UnknownSession`
        for an unknown id."""
        async with self._db.transaction("set_requester") as tx:
            touched = await tx.execute(
                "UPDATE sessions SET requester = :user, updated_at = :now WHERE id = :id",
                {"user": user_id, "now": self._now(), "id": session_id},
            )
            if touched == 0:
                raise UnknownSession(session_id)

    # -- the named transitions -------------------------------------------------------------------

    async def end_run(
        self, session_id: str, *, failed: bool = False, error: str | None = None
    ) -> bool:
        """running -> idle (or failed, recording `error`), conditional: a run that paused or
        was cancelled meanwhile is left alone (False). `error` without `failed` is a
        `ValueError`."""
        if error is not None and not failed:
            raise ValueError(f"an error is recorded only for a failed run (session {session_id!r})")
        return await self._claim(
            session_id, ("running",), "failed" if failed else "idle", error=error
        )

    async def claim_resume(self, session_id: str) -> bool:
        """awaiting_approval -> resuming, conditional: of concurrent claimers (the last click,
        the start-up sweep, another replica) exactly one resumes the run."""
        return await self._claim(session_id, ("awaiting_approval",), "resuming")

    async def resume_started(self, session_id: str) -> None:
        """resuming -> running, by the claimer once it has the decisions; `InvalidTransition`
        if the session is not resuming."""
        if not await self._claim(session_id, ("resuming",), "running"):
            session = await self.get_session(session_id)
            found = "gone" if session is None else session.state
            raise InvalidTransition(session_id, found, "resuming", "running")

    async def _claim(
        self,
        session_id: str,
        from_states: tuple[RunState, ...],
        to_state: RunState,
        *,
        error: str | None = None,
    ) -> bool:
        """Move the session to `to_state` only if it is in one of `from_states` (a conditional
        update: of concurrent claimers exactly one wins); sets the error (cleared unless given)
        and notes this store's instance as the owner of a running session. An unknown id is an
        error, not a lost race."""
        check_states([*from_states, to_state])
        if not from_states:
            return False
        marks = ", ".join(f":s{i}" for i in range(len(from_states)))
        params = {f"s{i}": state for i, state in enumerate(from_states)}
        async with self._db.transaction("claim") as tx:
            touched = await tx.execute(
                "UPDATE sessions SET state = :to, error = :error, updated_at = :now, "
                f"instance_id = :owner WHERE id = :id AND state IN ({marks})",
                {
                    **params,
                    "to": to_state,
                    "error": error,
                    "now": self._now(),
                    "owner": self._instance_id if to_state in _OWNED else None,
                    "id": session_id,
                },
            )
            if touched == 1:
                return True
            await self._session(tx, session_id)
            return False

    # -- history (agent_core.SessionStore) -------------------------------------------------------

    async def load_messages(self, session_id: str) -> list[ChatMessage]:
        """The whole history, oldest first (empty for an unknown session)."""
        async with self._db.reading("load_messages") as tx:
            rows = await tx.fetch_all(
                "SELECT body FROM messages WHERE session_id = :id ORDER BY seq", {"id": session_id}
            )
        return [ChatMessage.from_json(row[0]) for row in rows]

    async def message_at(self, session_id: str, seq: int) -> ChatMessage | None:
        """One message of the history by its position (a call's `message_seq`: the assistant
        turn that asked for it, whose text a card shows as the model's reason); None when
        there is none."""
        async with self._db.reading("message_at") as tx:
            row = await tx.fetch_one(
                "SELECT body FROM messages WHERE session_id = :id AND seq = :seq",
                {"id": session_id, "seq": seq},
            )
        return None if row is None else ChatMessage.from_json(row[0])

    async def append_messages(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        """Append in one transaction (nothing for an empty list); `UnknownSession` writes
        nothing.

        Writes only the new rows, however long the history is."""
        if not messages:
            return
        async with self._db.transaction("append_messages") as tx:
            await self._append(tx, session_id, messages)

    async def load_context(self, session_id: str) -> StoredContext:
        """The latest compaction summary and the messages after it, read in one snapshot: what
        a run loads, so a turn's cost does not grow with the thread (empty for an unknown
        session)."""
        async with self._db.reading("load_context", snapshot=True) as tx:
            row = await tx.fetch_one(
                "SELECT upto, kind, text FROM summaries WHERE session_id = :id "
                "ORDER BY upto DESC LIMIT 1",
                {"id": session_id},
            )
            summary = None
            if row is not None:
                kind = cast(Literal["summary", "note"], row["kind"])
                summary = Summary(int(row["upto"]), str(row["text"]), kind)
            rows = await tx.fetch_all(
                "SELECT body FROM messages WHERE session_id = :id AND seq >= :upto ORDER BY seq",
                {"id": session_id, "upto": 0 if summary is None else summary.upto},
            )
        return StoredContext(summary, [ChatMessage.from_json(r[0]) for r in rows])

    async def save_summary(self, session_id: str, summary: Summary) -> bool:
        """Store a summary of the first `summary.upto` messages, append-only. Conditional:
        False if a stored summary already reaches as far (of racing runs, one wins). A summary
        reaching past the stored messages is a `StoreError`; `UnknownSession` for an unknown
        id. The messages it stands for stay stored.

        Conditional on the session's row lock: of racing runs, the one reaching furthest
        first wins; a summary that does not reach further is refused (False)."""
        async with self._db.transaction("save_summary") as tx:
            await self._session(tx, session_id, lock=True)
            row = await tx.fetch_one(
                "SELECT COALESCE(MAX(seq) + 1, 0), "
                "(SELECT COALESCE(MAX(upto), 0) FROM summaries WHERE session_id = :id) "
                "FROM messages WHERE session_id = :id",
                {"id": session_id},
            )
            stored, latest = (0, 0) if row is None else (int(row[0]), int(row[1]))
            if not 0 < summary.upto <= stored:
                raise StoreError(
                    f"a summary of {summary.upto} messages does not fit session "
                    f"{session_id!r}, which has {stored}"
                )
            if summary.upto <= latest:
                return False
            await tx.execute(
                "INSERT INTO summaries (session_id, upto, kind, text, created_at) "
                "VALUES (:id, :upto, :kind, :text, :now)",
                {
                    "id": session_id,
                    "upto": summary.upto,
                    "kind": summary.kind,
                    "text": summary.text,
                    "now": self._now(),
                },
            )
            return True


# -- a paused run's timeline message -----------------------------------------------------------
# Where the timeline is one posted message edited in place (Slack refused streaming), its
# resume edits that message too, instead of posting a second one that leaves the first
# "waiting" forever. The resume may come after a restart, or on another replica: so the
# message's id and what it shows (the run layer's own text) are a row keyed by the session,
# written at the pause and dropped when the run ends.


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


# -- conversations in Slack's AI-app container -------------------------------------------------
# Which channel each one's user looks at, which channel its last run started with, and whether
# its first request has named it; in the database, so every process gives a run the channel
# its user moved to last (the run service decides which channels count: `bot.runs.context`).

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


# -- feedback votes: one per person per answer, the latest counts ------------------------------
# Clicking the same value again changes nothing, another value replaces the vote. The
# `feedback` audit row is written with the change, in the same transaction, so the log lists
# each vote and each change of mind once, whichever process or replica took the click.

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
