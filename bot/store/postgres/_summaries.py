"""Compaction summaries (see the SQLite twin, `bot/store/sqlite/_summaries.py`, and
docs/architecture.md, "Long threads")."""

from __future__ import annotations

from typing import Literal, cast

from agent_core.messages import ChatMessage
from agent_core.sessions import StoredContext, Summary

from ..errors import StoreError
from ._base import StoreBase

__all__ = ["Summaries"]


class Summaries(StoreBase):
    async def load_context(self, session_id: str) -> StoredContext:
        """The latest summary and the messages after it (one snapshot)."""
        async with self._transaction("load_context") as conn:
            row = await conn.fetchrow(
                "SELECT upto, kind, text FROM summaries WHERE session_id = $1 "
                "ORDER BY upto DESC LIMIT 1",
                session_id,
            )
            summary = None
            if row is not None:
                kind = cast(Literal["summary", "note"], row["kind"])
                summary = Summary(int(row["upto"]), str(row["text"]), kind)
            rows = await conn.fetch(
                "SELECT body FROM messages WHERE session_id = $1 AND seq >= $2 ORDER BY seq",
                session_id,
                0 if summary is None else summary.upto,
            )
        return StoredContext(summary, [ChatMessage.from_json(r[0]) for r in rows])

    async def save_summary(self, session_id: str, summary: Summary) -> bool:
        """Conditional on the session's row lock: of racing runs, the one reaching furthest
        first wins; a summary that does not reach further is refused (False)."""
        async with self._transaction("save_summary") as conn:
            await self._session_record(conn, session_id, lock=True)
            stored = await conn.fetchval(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = $1", session_id
            )
            latest = await conn.fetchval(
                "SELECT COALESCE(MAX(upto), 0) FROM summaries WHERE session_id = $1", session_id
            )
            if not 0 < summary.upto <= int(stored):
                raise StoreError(
                    f"a summary of {summary.upto} messages does not fit session "
                    f"{session_id!r}, which has {stored}"
                )
            if summary.upto <= int(latest):
                return False
            await conn.execute(
                "INSERT INTO summaries (session_id, upto, kind, text, created_at) "
                "VALUES ($1, $2, $3, $4, $5)",
                session_id,
                summary.upto,
                summary.kind,
                summary.text,
                self._now(),
            )
            return True
