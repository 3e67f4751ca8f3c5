"""The one numbered line of migrations from version 9 on, and what to apply to a database.

Versions 1 to 8 (SQLite) and 1 to 7 (PostgreSQL) are the two lines as they shipped, frozen in
`sqlite.py` and `postgres.py`. From version 9 on there is one line: version N means the same
tables on both databases, and each step gives its SQLite and its PostgreSQL statements side by
side (PostgreSQL has no version 8: its 7 is followed by 9). Never edit a shipped step: add the
next one to `MIGRATIONS`.

An adapter asks `steps(dialect, found)` for what to apply to a database at version `found`,
and applies each step with its version bump in one transaction (SQLite), or all of them in one
transaction under an advisory lock (PostgreSQL), so a crash leaves a whole version.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..db import Dialect
from . import postgres, sqlite

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration", "steps"]


@dataclass(frozen=True, slots=True)
class Migration:
    """One version of the common line: what takes each database from `version - 1` to it."""

    version: int
    why: str
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]

    def statements(self, dialect: Dialect) -> tuple[str, ...]:
        return self.sqlite if dialect == "sqlite" else self.postgres


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        9,
        # The model's context window as learned from a provider's refusal, shared by restarts
        # and replicas (last writer wins). SQLite also gains the `instance_id` columns
        # PostgreSQL has had from its version 1 (always NULL in a file one process holds), so
        # every statement of the store is the same text on both.
        "context windows; one set of columns on both databases",
        sqlite=(
            "ALTER TABLE sessions ADD COLUMN instance_id TEXT",
            "ALTER TABLE tool_calls ADD COLUMN instance_id TEXT",
            "ALTER TABLE run_queue ADD COLUMN instance_id TEXT",
            "ALTER TABLE inbox ADD COLUMN instance_id TEXT",
            """
            CREATE TABLE context_windows (
                model      TEXT PRIMARY KEY,
                tokens     INTEGER NOT NULL CHECK (tokens > 0),
                learned_at TEXT NOT NULL
            )
            """,
        ),
        postgres=(
            """
            CREATE TABLE context_windows (
                model      text PRIMARY KEY,
                tokens     integer NOT NULL CHECK (tokens > 0),
                learned_at timestamptz NOT NULL
            )
            """,
        ),
    ),
    Migration(
        10,
        # The one intake (`bot.slack.intake`) saves every request Slack sends, of whatever
        # kind, as an inbox row of kind 'request' before its acknowledgement. SQLite cannot
        # alter a CHECK: the table is rebuilt with its rows (same ids, so AUTOINCREMENT goes
        # on from where it was).
        "inbox rows of kind 'request': every request Slack sends",
        sqlite=(
            """
            CREATE TABLE inbox_v10 (
                id          INTEGER PRIMARY KEY AUTOINCREMENT,
                kind        TEXT NOT NULL CHECK (kind IN ('message','slash','request')),
                payload     TEXT NOT NULL,
                state       TEXT NOT NULL DEFAULT 'received'
                            CHECK (state IN ('received','claimed','done')),
                received_at TEXT NOT NULL,
                done_at     TEXT,
                instance_id TEXT
            )
            """,
            "INSERT INTO inbox_v10 (id, kind, payload, state, received_at, done_at, instance_id)"
            " SELECT id, kind, payload, state, received_at, done_at, instance_id FROM inbox",
            "DROP TABLE inbox",
            "ALTER TABLE inbox_v10 RENAME TO inbox",
            "CREATE INDEX inbox_by_state ON inbox (state, id)",
        ),
        postgres=(
            "ALTER TABLE inbox DROP CONSTRAINT inbox_kind_check",
            "ALTER TABLE inbox ADD CONSTRAINT inbox_kind_check"
            " CHECK (kind IN ('message','slash','request'))",
        ),
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
"""The version this code writes and reads; a database at a higher one is refused."""

_SHIPPED: dict[Dialect, tuple[tuple[str, ...], ...]] = {
    "sqlite": sqlite.SHIPPED,
    "postgresql": postgres.SHIPPED,
}


def steps(dialect: Dialect, found: int) -> list[tuple[int, tuple[str, ...]]]:
    """The (version, statements) to apply, in order, to a database at version `found`."""
    shipped = _SHIPPED[dialect]
    todo = [(n + 1, shipped[n]) for n in range(found, len(shipped))]
    todo += [(m.version, m.statements(dialect)) for m in MIGRATIONS if m.version > found]
    return todo
