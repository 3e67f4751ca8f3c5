"""Compaction summaries: what stands for the start of a long thread in requests to the model.

Append-only like the history: a summary is stored once, a later one reaches further, and the
messages they replace stay stored. Loading from the latest summary on keeps a turn's cost flat
however long the thread is (docs/architecture.md, "Long threads").
"""

from __future__ import annotations

from agent_core.messages import ChatMessage
from agent_core.sessions import StoredContext, Summary

from ..errors import StoreError
from ._connection import SQLiteConnection, fetch_all, fetch_one

__all__ = ["SummariesPart"]


class SummariesPart(SQLiteConnection):
    async def load_context(self, session_id: str) -> StoredContext:
        async with self._reading("load_context") as conn:
            row = await fetch_one(
                conn,
                "SELECT upto, kind, text FROM summaries WHERE session_id = ? "
                "ORDER BY upto DESC LIMIT 1",
                (session_id,),
            )
            summary = None if row is None else Summary(int(row[0]), str(row[2]), row[1])
            rows = await fetch_all(
                conn,
                "SELECT body FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (session_id, 0 if summary is None else summary.upto),
            )
        return StoredContext(summary, [ChatMessage.from_json(r[0]) for r in rows])

    async def save_summary(self, session_id: str, summary: Summary) -> bool:
        async with self._transaction("save_summary") as conn:
            await self._session_row(conn, session_id)
            row = await fetch_one(
                conn,
                "SELECT COALESCE(MAX(seq) + 1, 0), "
                "(SELECT COALESCE(MAX(upto), 0) FROM summaries WHERE session_id = ?) "
                "FROM messages WHERE session_id = ?",
                (session_id, session_id),
            )
            stored, latest = (0, 0) if row is None else (int(row[0]), int(row[1]))
            if not 0 < summary.upto <= stored:
                raise StoreError(
                    f"a summary of {summary.upto} messages does not fit session "
                    f"{session_id!r}, which has {stored}"
                )
            if summary.upto <= latest:
                return False
            await conn.execute(
                "INSERT INTO summaries (session_id, upto, kind, text, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (session_id, summary.upto, summary.kind, summary.text, self._now()),
            )
            return True
