"""The inbox on PostgreSQL: deliveries saved before Slack gets its 200, noted with the replica
that received them; a survivor claims, once, the rows of a replica whose lease lapsed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._rules import SEEN_EVENT_TTL
from ..models import InboxItem
from ..states import InboxKind
from ._recovery import _ORPHAN, RECOVER_LOCK, Recovery
from ._rows import count

__all__ = ["Inbox"]


class Inbox(Recovery):
    async def inbox_add(
        self, kind: InboxKind, payload: Mapping[str, Any], *, keys: Sequence[str] = ()
    ) -> int | None:
        try:
            return await self._add(kind, payload, keys)
        except _Seen:
            return None

    async def _add(self, kind: InboxKind, payload: Mapping[str, Any], keys: Sequence[str]) -> int:
        now = self._now()
        async with self._transaction("inbox_add") as conn:
            await conn.execute("DELETE FROM seen_events WHERE seen_at < $1", now - SEEN_EVENT_TTL)
            for key in keys:
                status = await conn.execute(
                    "INSERT INTO seen_events (event_id, seen_at) VALUES ($1, $2) "
                    "ON CONFLICT (event_id) DO NOTHING",
                    key,
                    now,
                )
                if count(status) != 1:
                    raise _Seen
            item_id: int = await conn.fetchval(
                "INSERT INTO inbox (kind, payload, instance_id, received_at) "
                "VALUES ($1, $2, $3, $4) RETURNING id",
                kind,
                dict(payload),
                self._instance_id,
                now,
            )
            return item_id

    async def inbox_done(self, item_id: int) -> None:
        async with self._transaction("inbox_done") as conn:
            await conn.execute(
                "UPDATE inbox SET state = 'done', done_at = $1 WHERE id = $2", self._now(), item_id
            )

    async def inbox_recover(self) -> list[InboxItem]:
        async with self._transaction("inbox_recover") as conn:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", RECOVER_LOCK)
            rows = await conn.fetch(
                # A row claimed by a store holding no lease is never claimed again: nothing
                # would tell whether its claimer is gone.
                "UPDATE inbox AS b SET state = 'claimed', instance_id = $2 "
                "WHERE (b.state = 'received' OR (b.state = 'claimed' AND b.instance_id IS NOT "
                "NULL)) AND " + _ORPHAN.format(t="b") + " RETURNING *",
                self._now(),
                self._instance_id,
            )
        items = [
            InboxItem(
                id=r["id"], kind=r["kind"], payload=r["payload"], received_at=r["received_at"]
            )
            for r in rows
        ]
        return sorted(items, key=lambda item: item.id)


class _Seen(Exception):
    """A dedupe key was seen before: roll the transaction back, save nothing."""
