"""`SQLiteStore`: the store over one SQLite file, for one serving process (WAL, `synchronous=FULL`).

The operations are the store's one implementation (`Store`); this module only picks the SQLite
adapter (`db/sqlite.py`: the exclusive lock, the one connection, the cancel-safe
`BEGIN IMMEDIATE`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import aiosqlite

from .db import utc_now
from .db.sqlite import SQLiteDb
from .rules import Person
from .store import Store

__all__ = ["SQLiteStore"]


class SQLiteStore(Store):
    """The bot's durable store in one SQLite file; a `bot.store.Store` (and so an
    `agent_core.SessionStore`). Use it as an async context manager.

    `exclusive=True` is for the one process that serves the bot: entering also takes an
    exclusive lock on the sidecar file `<db>.lock`, held until the store closes, and raises
    `DatabaseLocked` if another process holds it. Readers such as `opsgate audit` leave it
    False and open alongside. `person` names a user id in text for people and the model
    (refusals, "rejected by ..."); the store keeps ids plain, and the bot passes its mention
    function. `chained=False` writes audit rows without the chain: only for the benchmark's
    floor (`bench/audit_chain.py`), on a database whose chain trigger it dropped.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        exclusive: bool = False,
        clock: Callable[[], datetime] = utc_now,
        busy_timeout: float = 30.0,
        person: Person = str,
        chained: bool = True,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self._file = SQLiteDb(path, exclusive=exclusive, busy_timeout=busy_timeout)
        super().__init__(self._file, clock=clock, person=person, chained=chained, wake=wake)

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def exclusive(self) -> bool:
        return self._file.exclusive

    @property
    def lock_path(self) -> Path:
        return self._file.lock_path

    def __repr__(self) -> str:
        mode = ", exclusive=True" if self.exclusive else ""
        return f"SQLiteStore({str(self.path)!r}{mode})"

    def _connection(self) -> aiosqlite.Connection:
        """The one connection (tests read PRAGMAs and change counts through it)."""
        return self._file.connection()
