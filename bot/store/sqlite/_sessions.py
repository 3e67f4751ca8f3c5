"""Sessions (one per Slack thread), their history, and the named run-state transitions.

Callers never write a state directly: each step of a run's life has a name here, and each is a
conditional update so that of any number of concurrent claimers (tasks or processes) exactly one
wins. `docs/architecture.md` ("Run states") draws the machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from agent_core.messages import ChatMessage

from .._rules import check_states, new_id
from ..errors import InvalidTransition, UnknownSession
from ..models import SessionRow
from ..states import RunState
from ._connection import SQLiteConnection, fetch_all, fetch_one, session_row

__all__ = ["SessionsPart"]


class SessionsPart(SQLiteConnection):
    async def get_or_create_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow:
        async with self._transaction("get_or_create_session") as conn:
            key = (team_id, channel_id, thread_ts)
            sql = "SELECT * FROM sessions WHERE team_id = ? AND channel_id = ? AND thread_ts = ?"
            row = await fetch_one(conn, sql, key)
            if row is None:
                now = self._now()
                await conn.execute(
                    "INSERT INTO sessions (id, team_id, channel_id, thread_ts, state, created_at, "
                    "updated_at) VALUES (?, ?, ?, ?, 'idle', ?, ?)",
                    (new_id(), *key, now, now),
                )
                row = await fetch_one(conn, sql, key)
            assert row is not None
            return session_row(row)

    async def get_session(self, session_id: str) -> SessionRow | None:
        async with self._reading("get_session") as conn:
            row = await fetch_one(conn, "SELECT * FROM sessions WHERE id = ?", (session_id,))
        return None if row is None else session_row(row)

    async def find_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow | None:
        async with self._reading("find_session") as conn:
            row = await fetch_one(
                conn,
                "SELECT * FROM sessions WHERE team_id = ? AND channel_id = ? AND thread_ts = ?",
                (team_id, channel_id, thread_ts),
            )
        return None if row is None else session_row(row)

    async def set_requester(self, session_id: str, user_id: str) -> None:
        async with self._transaction("set_requester") as conn:
            cursor = await conn.execute(
                "UPDATE sessions SET requester = ?, updated_at = ? WHERE id = ?",
                (user_id, self._now(), session_id),
            )
            if cursor.rowcount == 0:
                raise UnknownSession(session_id)

    # -- the named transitions -------------------------------------------------------------------

    async def begin_run(self, session_id: str) -> bool:
        return await self._claim(session_id, ("idle", "failed"), "running")

    async def end_run(
        self, session_id: str, *, failed: bool = False, error: str | None = None
    ) -> bool:
        if error is not None and not failed:
            raise ValueError(f"an error is recorded only for a failed run (session {session_id!r})")
        return await self._claim(
            session_id, ("running",), "failed" if failed else "idle", error=error
        )

    async def claim_resume(self, session_id: str) -> bool:
        return await self._claim(session_id, ("awaiting_approval",), "resuming")

    async def resume_started(self, session_id: str) -> None:
        if not await self._claim(session_id, ("resuming",), "running"):
            session = await self.get_session(session_id)
            found = "gone" if session is None else session.state
            raise InvalidTransition(session_id, found, "resuming", "running")

    async def _claim(
        self,
        session_id: str,
        from_states: Sequence[RunState] | AbstractSet[RunState],
        to_state: RunState,
        *,
        error: str | None = None,
    ) -> bool:
        """Move the session to `to_state` only if it is in one of `from_states`; sets the error
        (cleared unless given). An unknown id is an error, not a lost race."""
        check_states([*from_states, to_state])
        if not from_states:
            return False
        marks = ", ".join("?" for _ in from_states)
        async with self._transaction("claim") as conn:
            cursor = await conn.execute(
                f"UPDATE sessions SET state = ?, error = ?, updated_at = ? "
                f"WHERE id = ? AND state IN ({marks})",
                (to_state, error, self._now(), session_id, *from_states),
            )
            if cursor.rowcount == 1:
                return True
            await self._session_row(conn, session_id)
            return False

    async def _set_state(
        self, session_id: str, state: RunState, *, error: str | None = None
    ) -> None:
        check_states([state])
        async with self._transaction("set_state") as conn:
            cursor = await conn.execute(
                "UPDATE sessions SET state = ?, error = ?, updated_at = ? WHERE id = ?",
                (state, error, self._now(), session_id),
            )
            if cursor.rowcount == 0:
                raise UnknownSession(session_id)

    # -- history (agent_core.SessionStore) -------------------------------------------------------

    async def load_messages(self, session_id: str) -> list[ChatMessage]:
        async with self._reading("load_messages") as conn:
            rows = await fetch_all(
                conn, "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            )
        return [ChatMessage.from_json(row[0]) for row in rows]

    async def append_messages(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        """Writes only the new rows, however long the history is."""
        if not messages:
            return
        async with self._transaction("append_messages") as conn:
            await self._append(conn, session_id, messages)
