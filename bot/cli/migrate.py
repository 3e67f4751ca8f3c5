"""`opsgate migrate`: bring the configured database's schema up to date (idempotent).

Start-up migrates too; this is for doing it ahead of a rolling upgrade of replicas, or to check
what version a database is at. Several replicas or `migrate`s at once are safe: PostgreSQL
migrates under an advisory lock, SQLite under its write lock.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TextIO

from ..settings import DatabaseURL, load_settings
from ..store import SCHEMA_VERSION, SQLiteStore

__all__ = ["migrate_command", "run_migrate"]


async def run_migrate(db: Path | DatabaseURL, *, out: TextIO) -> int:
    """Migrate `db` (a `Path` or a `DatabaseURL`); print one line saying where it stands."""
    if isinstance(db, DatabaseURL):
        return await _migrate_postgres(db, out)
    async with SQLiteStore(db):  # opening migrates (or refuses a newer file)
        pass
    print(_line(str(db), None, SCHEMA_VERSION, SCHEMA_VERSION), file=out)
    return 0


async def _migrate_postgres(url: DatabaseURL, out: TextIO) -> int:
    from ..store import SCHEMA_VERSION as PG_VERSION
    from ..store import PostgresStore

    async with PostgresStore(url.get_secret_value(), migrate=False) as store:
        before = await store.schema_version()
        after = await store.migrate()
    print(_line(str(url), before, after, PG_VERSION), file=out)
    return 0


def _line(name: str, before: int | None, after: int, latest: int) -> str:
    if before is not None and before < after:
        return f"migrated {name!r} from schema version {before} to {after} (the latest)"
    state = "the latest" if after == latest else f"this OpsGate knows up to {latest}"
    return f"{name!r} is at schema version {after} ({state})"


def migrate_command() -> int:
    db = load_settings(mode="audit").opsgate_db
    return asyncio.run(run_migrate(db, out=sys.stdout))
