"""The database seam: what the store's logic needs of a database, and nothing more.

The store's operations are written once, in SQL with `:named` parameters, over `Db` (`seam.py`);
each adapter (`sqlite.py`, `postgres.py`) keeps what only its database has: SQLite's exclusive
file lock and single connection, PostgreSQL's pool, row locks and advisory locks. Where an
operation's SQL must differ, its two variants stand next to each other in the one module that
uses them (`db.dialect` picks), never here.
"""

from .seam import (
    Db,
    Dialect,
    Params,
    Row,
    Tx,
    aware,
    json_text,
    numbered,
    to_text,
    utc_now,
)

__all__ = [
    "Db",
    "Dialect",
    "Params",
    "Row",
    "Tx",
    "aware",
    "json_text",
    "numbered",
    "to_text",
    "utc_now",
]
