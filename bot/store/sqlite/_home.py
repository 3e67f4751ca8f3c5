"""Who opened the Home tab lately, on SQLite: one row per person, the oldest forgotten past
`HOME_VIEWERS_KEPT`, so republishing after a decision stays bounded."""

from __future__ import annotations

from .._rules import HOME_VIEWERS_KEPT
from ..models import HomeViewer
from ._connection import SQLiteConnection, fetch_all

__all__ = ["HomePart"]


class HomePart(SQLiteConnection):
    async def home_opened(self, user_id: str, team_id: str | None = None) -> None:
        async with self._transaction("home_opened") as conn:
            await conn.execute(
                "INSERT INTO home_viewers (user_id, team_id, opened_at) VALUES (?, ?, ?) "
                "ON CONFLICT (user_id) DO UPDATE SET team_id = excluded.team_id, "
                "opened_at = excluded.opened_at",
                (user_id, team_id, self._now()),
            )
            await conn.execute(
                "DELETE FROM home_viewers WHERE user_id NOT IN (SELECT user_id FROM "
                "home_viewers ORDER BY opened_at DESC, user_id LIMIT ?)",
                (HOME_VIEWERS_KEPT,),
            )

    async def home_viewers(self) -> list[HomeViewer]:
        async with self._reading("home_viewers") as conn:
            rows = await fetch_all(
                conn,
                "SELECT user_id, team_id FROM home_viewers ORDER BY opened_at DESC, user_id",
            )
        return [HomeViewer(user_id=str(r[0]), team_id=r[1]) for r in rows]
