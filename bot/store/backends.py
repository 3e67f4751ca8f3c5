"""`open_store`: the store a setting names, SQLite for a file path and PostgreSQL for a URL.

The one place that knows both stores; it imports the PostgreSQL one (and so its driver) only
when a URL asks for it, so an SQLite deployment never loads asyncpg.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.settings import SCHEMES, DatabaseURL, url_scheme

from .errors import StoreError
from .store import Store

__all__ = ["open_store"]


def open_store(target: str | Path | DatabaseURL, *, exclusive: bool = False, **kw: Any) -> Store:
    """The store `OPSGATE_DB` names (not yet entered): a file path gives `SQLiteStore`, a
    `postgresql://` or `postgres://` URL (or `DatabaseURL`) `PostgresStore`, its driver imported
    only then. `exclusive` takes SQLite's lock (the bot does: a second bot on one file would
    "recover" the first one's running calls); PostgreSQL has none, replicas hold leases
    instead. Other keywords go to the store's constructor (`clock`, `person`, ...)."""
    text = target.get_secret_value() if isinstance(target, DatabaseURL) else str(target)
    scheme = None if isinstance(target, Path) else url_scheme(text)
    if scheme is None:
        from .sqlite import SQLiteStore

        return SQLiteStore(target, exclusive=exclusive, **kw)  # type: ignore[arg-type]
    if scheme not in SCHEMES:
        raise StoreError(
            f"no store backend for URL scheme {scheme!r}; use a file path or a postgresql:// URL"
        )
    try:
        from .postgres import PostgresStore
    except ModuleNotFoundError as exc:  # the driver is a dependency, but may be left out
        raise StoreError(
            f"cannot open a {scheme!r} URL: the PostgreSQL backend (bot.store.postgres) is not "
            f"available ({exc})"
        ) from exc
    return PostgresStore(text, **kw)
