"""`PostgresStore`: the store's contract on a PostgreSQL database several replicas share."""

from __future__ import annotations

from types import TracebackType

from ._edits import Edits
from ._home import Home
from ._inbox import Inbox
from ._summaries import Summaries
from ._wakeups import Wakeups

__all__ = ["PostgresStore"]


class PostgresStore(Summaries, Edits, Inbox, Home, Wakeups):
    """The bot's durable store on PostgreSQL; the same public API as `SQLiteStore`.

    Use it as an async context manager: entering opens an asyncpg pool and applies pending
    migrations (safely when replicas start together); leaving closes the pool. There is no
    exclusive lock: replicas share the database, and `register_instance` / `heartbeat` /
    `release` hold the lease that tells survivors whose work to recover; `wakeups()` tells
    this replica what the others changed.
    """

    def __repr__(self) -> str:
        return f"PostgresStore({self.name!r})"

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
