"""Sessions, their message history, the audit log and Slack event dedupe."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from agent_core.messages import ChatMessage

from .._rules import PROBE_EVENT_ID, SEEN_EVENT_TTL, check_states, new_id
from .._time import aware
from ..errors import InvalidTransition
from ..models import AuditRow, SessionRow
from ..states import RunState
from ._base import StoreBase
from ._rows import audit_row, count, session_row

__all__ = ["Sessions"]

_OWNED: frozenset[str] = frozenset({"running", "resuming"})
"""States in which a replica's run owns the session (recovery leaves live owners alone)."""


class Sessions(StoreBase):
    def _owner(self, state: str) -> str | None:
        return self._instance_id if state in _OWNED else None

    async def get_or_create_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow:
        """The session of a Slack thread, created `idle` on first use (racing creators agree)."""
        now = self._now()
        async with self._transaction("get_or_create_session") as conn:
            await conn.execute(
                "INSERT INTO sessions (id, team_id, channel_id, thread_ts, state, created_at, "
                "updated_at) VALUES ($1, $2, $3, $4, 'idle', $5, $5) "
                "ON CONFLICT (team_id, channel_id, thread_ts) DO NOTHING",
                new_id(),
                team_id,
                channel_id,
                thread_ts,
                now,
            )
            row = await conn.fetchrow(
                "SELECT * FROM sessions WHERE team_id = $1 AND channel_id = $2 AND thread_ts = $3",
                team_id,
                channel_id,
                thread_ts,
            )
        return session_row(row)

    async def get_session(self, session_id: str) -> SessionRow | None:
        async with self._reading("get_session") as conn:
            row = await conn.fetchrow("SELECT * FROM sessions WHERE id = $1", session_id)
        return None if row is None else session_row(row)

    async def find_session(
        self, team_id: str, channel_id: str, thread_ts: str
    ) -> SessionRow | None:
        async with self._reading("find_session") as conn:
            row = await conn.fetchrow(
                "SELECT * FROM sessions WHERE team_id = $1 AND channel_id = $2 AND thread_ts = $3",
                team_id,
                channel_id,
                thread_ts,
            )
        return None if row is None else session_row(row)

    async def set_requester(self, session_id: str, user_id: str) -> None:
        """Who asked for the current run; recorded as the actor of its approval requests."""
        async with self._transaction("set_requester") as conn:
            await self._session_record(conn, session_id, lock=True)
            await conn.execute(
                "UPDATE sessions SET requester = $1, updated_at = $2 WHERE id = $3",
                user_id,
                self._now(),
                session_id,
            )

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
        from_states: tuple[RunState, ...],
        to_state: RunState,
        *,
        error: str | None = None,
    ) -> bool:
        """Move the session to `to_state` only if it is in one of `from_states` (a conditional
        update: of concurrent claimers in any replica exactly one wins); sets the error (cleared
        unless given) and notes this store's instance as the owner of a running session."""
        check_states([*from_states, to_state])
        async with self._transaction("claim") as conn:
            status = await conn.execute(
                "UPDATE sessions SET state = $1, error = $2, updated_at = $3, instance_id = $4 "
                "WHERE id = $5 AND state = ANY($6::text[])",
                to_state,
                error,
                self._now(),
                self._owner(to_state),
                session_id,
                list(from_states),
            )
            if count(status) == 1:
                return True
            await self._session_record(conn, session_id)  # unknown id: an error, not a lost race
            return False

    # -- messages (agent_core.SessionStore) -----------------------------------------------------

    async def load_messages(self, session_id: str) -> list[ChatMessage]:
        """The whole history, oldest first (empty for an unknown session)."""
        async with self._reading("load_messages") as conn:
            rows = await conn.fetch(
                "SELECT body FROM messages WHERE session_id = $1 ORDER BY seq", session_id
            )
        return [ChatMessage.from_json(row[0]) for row in rows]

    async def append_messages(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        """Append in one transaction, writing only the new rows."""
        if not messages:
            return
        async with self._transaction("append_messages") as conn:
            await self._append(conn, session_id, messages)

    # -- audit ----------------------------------------------------------------------------------

    async def audit(
        self,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one audit row (append-only: triggers refuse updates, deletes and truncation)."""
        async with self._transaction("audit") as conn:
            await self._write_audit(
                conn, event, actor=actor, session_id=session_id, call_id=call_id, details=details
            )

    async def audit_rows(self, *, since: datetime | None = None) -> list[AuditRow]:
        """Audit rows in the order they were written, from `since` on if given."""
        async with self._reading("audit_rows") as conn:
            if since is None:
                rows = await conn.fetch("SELECT * FROM audit ORDER BY id")
            else:
                rows = await conn.fetch(
                    "SELECT * FROM audit WHERE at >= $1 ORDER BY id", aware(since)
                )
        return [audit_row(row) for row in rows]

    # -- Slack retries --------------------------------------------------------------------------

    async def first_sighting(self, event_id: str) -> bool:
        """True the first time an event id is seen, by any replica; forgets in a day."""
        now = self._now()
        async with self._transaction("first_sighting") as conn:
            await conn.execute("DELETE FROM seen_events WHERE seen_at < $1", now - SEEN_EVENT_TTL)
            status = await conn.execute(
                "INSERT INTO seen_events (event_id, seen_at) VALUES ($1, $2) "
                "ON CONFLICT (event_id) DO NOTHING",
                event_id,
                now,
            )
        return count(status) == 1

    async def probe_write(self) -> None:
        """Write one row (readiness: the database accepts writes); raises if it cannot."""
        async with self._transaction("probe_write") as conn:
            await conn.execute(
                "INSERT INTO seen_events (event_id, seen_at) VALUES ($1, $2) "
                "ON CONFLICT (event_id) DO UPDATE SET seen_at = EXCLUDED.seen_at",
                PROBE_EVENT_ID,
                self._now(),
            )
