"""Who opened the Home tab lately, on PostgreSQL: one row per person, the oldest forgotten past
`HOME_VIEWERS_KEPT`, so republishing after a decision stays bounded."""

from __future__ import annotations

from .._rules import HOME_VIEWERS_KEPT
from ..models import HomeViewer
from ._base import StoreBase

__all__ = ["Home"]


class Home(StoreBase):
    async def home_opened(self, user_id: str, team_id: str | None = None) -> None:
        async with self._transaction("home_opened") as conn:
            await conn.execute(
                "INSERT INTO home_viewers (user_id, team_id, opened_at) VALUES ($1, $2, $3) "
                "ON CONFLICT (user_id) DO UPDATE SET team_id = excluded.team_id, "
                "opened_at = excluded.opened_at",
                user_id,
                team_id,
                self._now(),
            )
            await conn.execute(
                "DELETE FROM home_viewers WHERE user_id NOT IN (SELECT user_id FROM "
                "home_viewers ORDER BY opened_at DESC, user_id LIMIT $1)",
                HOME_VIEWERS_KEPT,
            )

    async def home_viewers(self) -> list[HomeViewer]:
        async with self._reading("home_viewers") as conn:
            records = await conn.fetch(
                "SELECT user_id, team_id FROM home_viewers ORDER BY opened_at DESC, user_id"
            )
        return [HomeViewer(user_id=r["user_id"], team_id=r["team_id"]) for r in records]
