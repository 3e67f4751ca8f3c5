"""The inbox: deliveries saved before Slack gets its 200, and their recovery after a crash.

The file is held by one serving process (`exclusive=True`), so at its start-up every row not
done was left by a process that is gone. Claims are conditional all the same, so two stores
recovering at once never take the same row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._rules import SEEN_EVENT_TTL
from .._text import json_text
from .._time import to_db
from ..models import InboxItem
from ..states import InboxKind
from ._connection import SQLiteConnection, fetch_all

__all__ = ["InboxPart"]


class InboxPart(SQLiteConnection):
    async def inbox_add(
        self, kind: InboxKind, payload: Mapping[str, Any], *, keys: Sequence[str] = ()
    ) -> int | None:
        try:
            return await self._add(kind, payload, keys)
        except _Seen:
            return None

    async def _add(self, kind: InboxKind, payload: Mapping[str, Any], keys: Sequence[str]) -> int:
        now = self._clock()
        async with self._transaction("inbox_add") as conn:
            await conn.execute(
                "DELETE FROM seen_events WHERE seen_at < ?", (to_db(now - SEEN_EVENT_TTL),)
            )
            for key in keys:
                cursor = await conn.execute(
                    "INSERT OR IGNORE INTO seen_events (event_id, seen_at) VALUES (?, ?)",
                    (key, to_db(now)),
                )
                if cursor.rowcount != 1:
                    # Seen before: the rollback also releases the keys claimed above.
                    raise _Seen
            cursor = await conn.execute(
                "INSERT INTO inbox (kind, payload, received_at) VALUES (?, ?, ?)",
                (kind, json_text(dict(payload)), to_db(now)),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

    async def inbox_done(self, item_id: int) -> None:
        async with self._transaction("inbox_done") as conn:
            await conn.execute(
                "UPDATE inbox SET state = 'done', done_at = ? WHERE id = ?", (self._now(), item_id)
            )

    async def inbox_recover(self) -> list[InboxItem]:
        # `claimed` rows too when this store holds the file: their claimer is gone.
        states = ("received", "claimed") if self.exclusive else ("received",)
        async with self._transaction("inbox_recover") as conn:
            rows = await fetch_all(
                conn,
                f"SELECT * FROM inbox WHERE state IN ({', '.join('?' * len(states))}) ORDER BY id",
                states,
            )
            await conn.executemany(
                "UPDATE inbox SET state = 'claimed' WHERE id = ?", [(r["id"],) for r in rows]
            )
        return [
            InboxItem(
                id=r["id"],
                kind=r["kind"],
                payload=json.loads(r["payload"]),
                received_at=r["received_at"],
            )
            for r in rows
        ]


class _Seen(Exception):
    """A dedupe key was seen before: roll the transaction back, save nothing."""
