"""The store's schema: one numbered line of migrations, with per-dialect DDL where it differs.

Versions 1 to 8 (SQLite) and 1 to 7 (PostgreSQL) are the two lines as they shipped, frozen in
`sqlite.py` and `postgres.py`; from version 9 on `migrations.py` holds one line for both, each
step with its SQLite and its PostgreSQL statements side by side.
"""

from .migrations import AUDIT_CHANNEL, MIGRATIONS, SCHEMA_VERSION, Migration, Statement, steps
from .postgres import WAKE_CHANNEL

__all__ = [  # noqa: RUF022 -- plain sorted() order, as every package here
    "AUDIT_CHANNEL",
    "MIGRATIONS",
    "Migration",
    "SCHEMA_VERSION",
    "Statement",
    "WAKE_CHANNEL",
    "steps",
]
