"""The one numbered line of migrations from version 9 on, and what to apply to a database.

Versions 1 to 8 (SQLite) and 1 to 7 (PostgreSQL) are the two lines as they shipped, frozen in
`sqlite.py` and `postgres.py`. From version 9 on there is one line: version N means the same
tables on both databases, and each step gives its SQLite and its PostgreSQL statements side by
side (PostgreSQL has no version 8: its 7 is followed by 9). Never edit a shipped step: add the
next one to `MIGRATIONS`.

The store (`StoreCore._migrate`) asks `steps(dialect, found)` for what to apply to a database
at version `found`, and applies each step with its version bump in one transaction (SQLite),
or all of them in one transaction under an advisory lock (PostgreSQL), so a crash leaves a
whole version.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..chain import chain_existing_rows
from ..db import Dialect, Tx
from . import postgres, sqlite
from .tables import (
    EXPORT_POSTGRES,
    EXPORT_SQLITE,
    EXPORT_START,
    OUTBOX_INDEXES,
    V18,
    budgets_table,
    ladder_tables,
    outbox_table,
    pins_table,
    plane_tables,
)

__all__ = ["AUDIT_CHANNEL", "MIGRATIONS", "SCHEMA_VERSION", "Migration", "Statement", "steps"]

Statement = str | Callable[[Tx], Awaitable[None]]
"""DDL, or a Python step that rewrites rows (what SQL alone cannot compute, such as a hash),
run in the same transaction as the DDL around it."""

AUDIT_CHANNEL = "opsgate_audit"
"""The LISTEN/NOTIFY channel on which `opsgate audit --follow` hears of new audit rows."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One version of the common line: what takes each database from `version - 1` to it."""

    version: int
    why: str
    sqlite: tuple[Statement, ...]
    postgres: tuple[Statement, ...]

    def statements(self, dialect: Dialect) -> tuple[Statement, ...]:
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
        # The audit chain (`bot/store/chain.py`): each row's seq, prev_hash and hash, and a
        # one-row chain head that every append locks and a trigger advances (refusing a row
        # that is not the next link) in the append's transaction, so replicas append one at
        # a time without locking the table. Ids are given by the
        # append (the hash covers the id), so PostgreSQL's identity becomes BY DEFAULT. The
        # rows already written are chained here, with the update trigger lifted for it only.
        # And the export's cursor, and the paused run's span ids on its calls (traces).
        "the tamper-evident audit chain, its export cursor, span ids on calls",
        sqlite=(
            "ALTER TABLE audit ADD COLUMN seq INTEGER",
            "ALTER TABLE audit ADD COLUMN prev_hash TEXT",
            "ALTER TABLE audit ADD COLUMN hash TEXT",
            """
            CREATE TABLE audit_chain (
                singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
                seq       INTEGER NOT NULL,
                hash      TEXT NOT NULL,
                last_id   INTEGER NOT NULL
            )
            """,
            "DROP TRIGGER audit_no_update",
            chain_existing_rows,
            """
            CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
            BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: rows cannot be updated'); END
            """,
            "CREATE UNIQUE INDEX audit_by_seq ON audit (seq)",
            """
            CREATE TRIGGER audit_chain_advance AFTER INSERT ON audit
            BEGIN
                SELECT RAISE(ABORT, 'the audit chain moved: the row is not its next link')
                WHERE NOT EXISTS (SELECT 1 FROM audit_chain
                                  WHERE seq = NEW.seq - 1 AND hash = NEW.prev_hash);
                UPDATE audit_chain SET seq = NEW.seq, hash = NEW.hash, last_id = NEW.id;
            END
            """,
            EXPORT_SQLITE,
            EXPORT_START,
            "ALTER TABLE tool_calls ADD COLUMN trace_id TEXT",
            "ALTER TABLE tool_calls ADD COLUMN span_id TEXT",
        ),
        postgres=(
            "ALTER TABLE audit ADD COLUMN seq bigint, ADD COLUMN prev_hash text, "
            "ADD COLUMN hash text",
            "ALTER TABLE audit ALTER COLUMN id SET GENERATED BY DEFAULT",
            """
            CREATE TABLE audit_chain (
                singleton integer PRIMARY KEY CHECK (singleton = 1),
                seq       bigint NOT NULL,
                hash      text NOT NULL,
                last_id   bigint NOT NULL
            )
            """,
            "ALTER TABLE audit DISABLE TRIGGER audit_no_change",
            chain_existing_rows,
            "ALTER TABLE audit ENABLE TRIGGER audit_no_change",
            "ALTER TABLE audit ALTER COLUMN seq SET NOT NULL, "
            "ALTER COLUMN prev_hash SET NOT NULL, ALTER COLUMN hash SET NOT NULL",
            "CREATE UNIQUE INDEX audit_by_seq ON audit (seq)",
            """
            CREATE FUNCTION opsgate_audit_chain() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                UPDATE audit_chain SET seq = NEW.seq, hash = NEW.hash, last_id = NEW.id
                WHERE seq = NEW.seq - 1 AND hash = NEW.prev_hash;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'the audit chain moved: seq % is not its next link', NEW.seq;
                END IF;
                RETURN NULL;
            END
            $$
            """,
            """
            CREATE TRIGGER audit_chain_advance AFTER INSERT ON audit
            FOR EACH ROW EXECUTE FUNCTION opsgate_audit_chain()
            """,
            f"""
            CREATE FUNCTION opsgate_audit_appended() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('{AUDIT_CHANNEL}', NEW.seq::text);
                RETURN NULL;
            END
            $$
            """,
            """
            CREATE TRIGGER audit_appended AFTER INSERT ON audit
            FOR EACH ROW EXECUTE FUNCTION opsgate_audit_appended()
            """,
            EXPORT_POSTGRES,
            EXPORT_START,
            "ALTER TABLE tool_calls ADD COLUMN trace_id text, ADD COLUMN span_id text",
        ),
    ),
    Migration(
        11,
        # The one intake (`bot.slack.app`) saves every request Slack sends, of whatever
        # kind, as an inbox row of kind 'request' before its acknowledgement. SQLite cannot
        # alter a CHECK: the table is rebuilt with its rows (same ids, so AUTOINCREMENT goes
        # on from where it was).
        "inbox rows of kind 'request': every request Slack sends",
        sqlite=(
            """
            CREATE TABLE inbox_v11 (
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
            "INSERT INTO inbox_v11 (id, kind, payload, state, received_at, done_at, instance_id)"
            " SELECT id, kind, payload, state, received_at, done_at, instance_id FROM inbox",
            "DROP TABLE inbox",
            "ALTER TABLE inbox_v11 RENAME TO inbox",
            "CREATE INDEX inbox_by_state ON inbox (state, id)",
        ),
        postgres=(
            "ALTER TABLE inbox DROP CONSTRAINT inbox_kind_check",
            "ALTER TABLE inbox ADD CONSTRAINT inbox_kind_check"
            " CHECK (kind IN ('message','slash','request'))",
        ),
    ),
    Migration(
        12,
        # Every write the bot owes Slack, stored before it is tried (`bot.store.outbox`):
        # claimed for a lease by the sender of whichever replica is alive, deleted once sent.
        "the outbox of Slack writes",
        sqlite=(outbox_table("TEXT", "INTEGER", "TEXT", "TEXT"), *OUTBOX_INDEXES),
        postgres=(outbox_table("text", "integer", "jsonb", "timestamptz"), *OUTBOX_INDEXES),
    ),
    Migration(
        13,
        # Conversations in Slack's AI-app container (`bot/store/sessions.py`): the
        # channel the user looks at, the channel the last run started with (its resume gets
        # the same tools) and when the conversation was titled, shared by restarts and by
        # every process on the database.
        "AI-app container conversations: the channel each looks at",
        sqlite=(
            """
            CREATE TABLE assistant_threads (
                team_id         TEXT NOT NULL,
                channel_id      TEXT NOT NULL,
                thread_ts       TEXT NOT NULL,
                viewing_channel TEXT,
                run_channel     TEXT,
                titled_at       TEXT,
                updated_at      TEXT NOT NULL,
                PRIMARY KEY (team_id, channel_id, thread_ts)
            ) WITHOUT ROWID
            """,
        ),
        postgres=(
            """
            CREATE TABLE assistant_threads (
                team_id         text NOT NULL,
                channel_id      text NOT NULL,
                thread_ts       text NOT NULL,
                viewing_channel text,
                run_channel     text,
                titled_at       timestamptz,
                updated_at      timestamptz NOT NULL,
                PRIMARY KEY (team_id, channel_id, thread_ts)
            )
            """,
        ),
    ),
    Migration(
        14,
        # Change freezes and break-glass. Ad hoc freezes (`/opsgate freeze`) must hold
        # on every replica, so they are rows; each start and end of a freeze is announced and
        # audited once across replicas by claiming its key here; a break-glass use is a row
        # until an approver other than the breaker marks it reviewed.
        "ad hoc freezes, freeze announcements claimed once, break-glass uses to review",
        sqlite=(
            """
            CREATE TABLE freezes (
                id         TEXT PRIMARY KEY,
                channel_id TEXT NOT NULL,
                started_by TEXT NOT NULL,
                reason     TEXT NOT NULL,
                starts_at  TEXT NOT NULL,
                ends_at    TEXT NOT NULL,
                ended_by   TEXT
            )
            """,
            "CREATE INDEX freezes_by_end ON freezes (ends_at)",
            """
            CREATE TABLE freeze_notices (
                key        TEXT PRIMARY KEY,
                claimed_at TEXT NOT NULL
            )
            """,
            """
            CREATE TABLE break_glass (
                ledger_id   TEXT PRIMARY KEY,
                channel_id  TEXT NOT NULL,
                broken_by   TEXT NOT NULL,
                reason      TEXT NOT NULL,
                freeze_key  TEXT NOT NULL,
                broken_at   TEXT NOT NULL,
                reviewed_by TEXT,
                reviewed_at TEXT
            )
            """,
        ),
        postgres=(
            """
            CREATE TABLE freezes (
                id         text PRIMARY KEY,
                channel_id text NOT NULL,
                started_by text NOT NULL,
                reason     text NOT NULL,
                starts_at  timestamptz NOT NULL,
                ends_at    timestamptz NOT NULL,
                ended_by   text
            )
            """,
            "CREATE INDEX freezes_by_end ON freezes (ends_at)",
            """
            CREATE TABLE freeze_notices (
                key        text PRIMARY KEY,
                claimed_at timestamptz NOT NULL
            )
            """,
            """
            CREATE TABLE break_glass (
                ledger_id   text PRIMARY KEY,
                channel_id  text NOT NULL,
                broken_by   text NOT NULL,
                reason      text NOT NULL,
                freeze_key  text NOT NULL,
                broken_at   timestamptz NOT NULL,
                reviewed_by text,
                reviewed_at timestamptz
            )
            """,
        ),
    ),
    Migration(
        15,
        # Previews: the last run of a gated call's preview (JSON text on both
        # databases), shown on its card and bound to its approval.
        "the last preview run of a gated call",
        sqlite=("ALTER TABLE tool_calls ADD COLUMN preview TEXT",),
        postgres=("ALTER TABLE tool_calls ADD COLUMN preview text",),
    ),
    Migration(
        16,
        # each channel's one "queued" notice of a burst, shared by every process
        # (`bot.store.queue_notices`): the posted message's ts and what it shows, so any
        # replica, or the next start, edits that message instead of posting another.
        "each channel's queued notice: its message and what it shows",
        sqlite=(
            """
            CREATE TABLE queue_notices (
                channel_id  TEXT PRIMARY KEY,
                concurrency INTEGER NOT NULL,
                asks        INTEGER NOT NULL,
                ts          TEXT,
                shown       TEXT,
                opened_at   TEXT NOT NULL
            )
            """,
        ),
        postgres=(
            """
            CREATE TABLE queue_notices (
                channel_id  text PRIMARY KEY,
                concurrency integer NOT NULL,
                asks        bigint NOT NULL,
                ts          text,
                shown       text,
                opened_at   timestamptz NOT NULL
            )
            """,
        ),
    ),
    Migration(
        17,
        # A call whose parts match several rules that ask: each rule's quorum, and which of
        # its approvals count toward which (JSON text on both databases; NULL: one
        # requirement, every approval toward it, as rows written before).
        "each requirement of a gated call and the approvals that count toward it",
        sqlite=("ALTER TABLE tool_calls ADD COLUMN quorum TEXT",),
        postgres=("ALTER TABLE tool_calls ADD COLUMN quorum text",),
    ),
    Migration(
        18,
        # The audit chain head records whether the chain is keyed, by the key's fingerprint
        # (`bot/store/chain.py`), so a keyed log rewritten with plain SHA-256 fails `verify`;
        # feedback votes, one per person per answer (`bot/store/sessions.py`); and the message
        # a paused run's timeline is shown in, which its resume edits (`bot/store/sessions.py`).
        "the audit chain's key fingerprint, feedback votes, paused runs' timeline messages",
        sqlite=("ALTER TABLE audit_chain ADD COLUMN key_fingerprint TEXT", *V18),
        postgres=("ALTER TABLE audit_chain ADD COLUMN key_fingerprint text", *V18),
    ),
    Migration(
        19,
        # MCP tool pinning (`bot.store.mcp_pins`): each tool's reviewed definition and digest.
        "pinned MCP tool definitions, and the changed ones waiting for review",
        sqlite=(pins_table("TEXT"),),
        postgres=(pins_table("timestamptz"),),
    ),
    Migration(
        20,
        # When nobody answers (`bot.store.ladder`): the steps of a waiting call's escalation
        # ladder passed so far and the reminders sent, each moved on by a compare-and-set.
        "a waiting call's escalation steps passed and reminders sent; delegations",
        sqlite=ladder_tables("INTEGER", "TEXT"),
        postgres=ladder_tables("integer", "timestamptz"),
    ),
    Migration(
        21,
        # Requests from outside automation (`bot.store.plane`) and the receipts' signing key,
        # shared by every replica on the database.
        "outside approval requests and the receipt signing key",
        sqlite=plane_tables("TEXT", "TEXT"),
        postgres=plane_tables("text", "timestamptz"),
    ),
    Migration(
        22,
        # Slack's rate limits shared by the replicas (`SlackBudgets`): each bucket's
        # tokens, when they were counted and until when Slack said wait (the pacer's seconds).
        "Slack budgets shared by the replicas",
        sqlite=(budgets_table("TEXT", "REAL"),),
        postgres=(budgets_table("text", "double precision"),),
    ),
    Migration(
        23,
        # A queued message that went without its 👀 (its Slack budget was spent: a storm), so
        # that a restart's recovery, or another replica's, does not remove a mark never made.
        "queued messages left without their working mark",
        sqlite=("ALTER TABLE run_queue ADD COLUMN unmarked INTEGER NOT NULL DEFAULT 0",),
        postgres=("ALTER TABLE run_queue ADD COLUMN unmarked boolean NOT NULL DEFAULT false",),
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
"""The version this code writes and reads; a database at a higher one is refused."""

_SHIPPED: dict[Dialect, tuple[tuple[Statement, ...], ...]] = {
    "sqlite": sqlite.SHIPPED,
    "postgresql": postgres.SHIPPED,
}


def steps(dialect: Dialect, found: int) -> list[tuple[int, tuple[Statement, ...]]]:
    """The (version, statements) to apply, in order, to a database at version `found`."""
    shipped = _SHIPPED[dialect]
    todo = [(n + 1, shipped[n]) for n in range(found, len(shipped))]
    todo += [(m.version, m.statements(dialect)) for m in MIGRATIONS if m.version > found]
    return todo
