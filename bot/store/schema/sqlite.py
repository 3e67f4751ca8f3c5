"""SQLite's versions 1 to 8 as they shipped (`PRAGMA user_version` says how far a file got).

Frozen: from version 9 on, `bot.store.schema` holds one line of migrations for both databases.
"""

from __future__ import annotations

__all__ = ["SHIPPED"]

_V1 = (
    """
    CREATE TABLE sessions (
        id             TEXT PRIMARY KEY,
        team_id        TEXT NOT NULL,
        channel_id     TEXT NOT NULL,
        thread_ts      TEXT NOT NULL,
        state          TEXT NOT NULL DEFAULT 'idle'
                       CHECK (state IN ('idle','running','awaiting_approval','resuming','failed')),
        requester      TEXT,
        error          TEXT,
        batch_id       TEXT,
        last_calls_seq INTEGER,
        created_at     TEXT NOT NULL,
        updated_at     TEXT NOT NULL,
        UNIQUE (team_id, channel_id, thread_ts)
    )
    """,
    "CREATE INDEX sessions_by_state ON sessions (state)",
    """
    CREATE TABLE messages (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        seq        INTEGER NOT NULL,
        body       TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE tool_calls (
        id             TEXT PRIMARY KEY,
        session_id     TEXT NOT NULL REFERENCES sessions (id),
        batch_id       TEXT,
        message_seq    INTEGER NOT NULL,
        position       INTEGER NOT NULL,
        call_id        TEXT NOT NULL,
        name           TEXT NOT NULL,
        arguments      TEXT NOT NULL,
        digest         TEXT NOT NULL,
        needs_approval INTEGER NOT NULL CHECK (needs_approval IN (0, 1)),
        status         TEXT NOT NULL
                       CHECK (status IN ('pending','approved','rejected','expired',
                                         'executing','done','interrupted')),
        requested_by   TEXT,
        decided_by     TEXT,
        decided_team   TEXT,
        decided_at     TEXT,
        reason         TEXT,
        result         TEXT,
        is_error       INTEGER CHECK (is_error IN (0, 1)),
        card_channel   TEXT,
        card_ts        TEXT,
        expires_at     TEXT,
        ttl            TEXT,
        approvals      TEXT NOT NULL DEFAULT '[]',
        created_at     TEXT NOT NULL,
        started_at     TEXT,
        finished_at    TEXT,
        UNIQUE (session_id, message_seq, call_id)
    )
    """,
    "CREATE INDEX tool_calls_by_batch ON tool_calls (batch_id, position)",
    "CREATE INDEX tool_calls_by_status ON tool_calls (status, expires_at)",
    """
    CREATE TABLE audit (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        at         TEXT NOT NULL,
        event      TEXT NOT NULL,
        actor      TEXT,
        session_id TEXT,
        call_id    TEXT,
        details    TEXT NOT NULL DEFAULT '{}'
    )
    """,
    "CREATE INDEX audit_by_time ON audit (at)",
    """
    CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: rows cannot be updated'); END
    """,
    """
    CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: rows cannot be deleted'); END
    """,
    """
    CREATE TABLE seen_events (
        event_id TEXT PRIMARY KEY,
        seen_at  TEXT NOT NULL
    )
    """,
    "CREATE INDEX seen_events_by_time ON seen_events (seen_at)",
)

_V2 = (
    # A cancelled run marks the calls it stopped `cancelled`: SQLite cannot widen a CHECK in
    # place, so the ledger is rebuilt with the same columns in the same order.
    """
    CREATE TABLE tool_calls_v2 (
        id             TEXT PRIMARY KEY,
        session_id     TEXT NOT NULL REFERENCES sessions (id),
        batch_id       TEXT,
        message_seq    INTEGER NOT NULL,
        position       INTEGER NOT NULL,
        call_id        TEXT NOT NULL,
        name           TEXT NOT NULL,
        arguments      TEXT NOT NULL,
        digest         TEXT NOT NULL,
        needs_approval INTEGER NOT NULL CHECK (needs_approval IN (0, 1)),
        status         TEXT NOT NULL
                       CHECK (status IN ('pending','approved','rejected','expired',
                                         'executing','done','interrupted','cancelled')),
        requested_by   TEXT,
        decided_by     TEXT,
        decided_team   TEXT,
        decided_at     TEXT,
        reason         TEXT,
        result         TEXT,
        is_error       INTEGER CHECK (is_error IN (0, 1)),
        card_channel   TEXT,
        card_ts        TEXT,
        expires_at     TEXT,
        ttl            TEXT,
        approvals      TEXT NOT NULL DEFAULT '[]',
        created_at     TEXT NOT NULL,
        started_at     TEXT,
        finished_at    TEXT,
        UNIQUE (session_id, message_seq, call_id)
    )
    """,
    "INSERT INTO tool_calls_v2 SELECT * FROM tool_calls",
    "DROP TABLE tool_calls",
    "ALTER TABLE tool_calls_v2 RENAME TO tool_calls",
    "CREATE INDEX tool_calls_by_batch ON tool_calls (batch_id, position)",
    "CREATE INDEX tool_calls_by_status ON tool_calls (status, expires_at)",
    # Messages that should start a run wait here, so a burst (or a restart) loses none.
    """
    CREATE TABLE run_queue (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id  TEXT NOT NULL REFERENCES sessions (id),
        channel_id  TEXT NOT NULL,
        requester   TEXT NOT NULL,
        text        TEXT NOT NULL,
        message_ts  TEXT,
        state       TEXT NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued','started','done','cancelled')),
        history_seq INTEGER,
        enqueued_at TEXT NOT NULL,
        started_at  TEXT,
        finished_at TEXT
    )
    """,
    "CREATE INDEX run_queue_by_channel ON run_queue (state, channel_id, id)",
    "CREATE INDEX run_queue_by_session ON run_queue (session_id, state)",
)

_V3: tuple[str, ...] = (
    # When the "decide soon" reminder went out (policy `remind_before`), so it goes out once.
    "ALTER TABLE tool_calls ADD COLUMN reminded_at TEXT",
)

_V4: tuple[str, ...] = (
    # Compaction summaries of long threads: what stands for the first `upto` messages in
    # requests to the model. Append-only; the messages themselves stay.
    """
    CREATE TABLE summaries (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        upto       INTEGER NOT NULL CHECK (upto > 0),
        kind       TEXT NOT NULL CHECK (kind IN ('summary', 'note')),
        text       TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (session_id, upto)
    ) WITHOUT ROWID
    """,
)

_V5: tuple[str, ...] = (
    # Edit before approving: the arguments a human changed a call to; `arguments` keeps the
    # model's own.
    "ALTER TABLE tool_calls ADD COLUMN edited_arguments TEXT",
    "ALTER TABLE tool_calls ADD COLUMN edited_digest TEXT",
    "ALTER TABLE tool_calls ADD COLUMN edited_by TEXT",
    # Time-boxed allowances ("Allow for 1h"): a call shape that runs without a card in one
    # channel until `expires_at`.
    """
    CREATE TABLE allowances (
        id         TEXT PRIMARY KEY,
        channel_id TEXT NOT NULL,
        tool       TEXT NOT NULL,
        shape      TEXT NOT NULL,
        label      TEXT NOT NULL,
        granted_by TEXT NOT NULL,
        ledger_id  TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        revoked_at TEXT,
        revoked_by TEXT
    )
    """,
    "CREATE INDEX allowances_by_channel ON allowances (channel_id, tool, expires_at)",
)

_V6: tuple[str, ...] = (
    # What the card shows now (`rules.card_state`): recovery redraws every card whose drawn
    # state differs from its call's, e.g. after a crash between a cancel and the redraw.
    "ALTER TABLE tool_calls ADD COLUMN card_drawn TEXT",
    "UPDATE tool_calls SET card_drawn = 'before-v5' WHERE card_ts IS NOT NULL "
    "AND status <> 'pending'",
    # Why the card may not be approved (its full arguments could not be attached), or NULL.
    "ALTER TABLE tool_calls ADD COLUMN card_locked TEXT",
)


_V7: tuple[str, ...] = (
    # Deliveries Slack got a 200 for, saved before the 200 (docs/architecture.md): processed
    # from here, and recovered at start-up if the process died first.
    """
    CREATE TABLE inbox (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        kind        TEXT NOT NULL CHECK (kind IN ('message','slash')),
        payload     TEXT NOT NULL,
        state       TEXT NOT NULL DEFAULT 'received'
                    CHECK (state IN ('received','claimed','done')),
        received_at TEXT NOT NULL,
        done_at     TEXT
    )
    """,
    "CREATE INDEX inbox_by_state ON inbox (state, id)",
)

_V8: tuple[str, ...] = (
    # Who opened the Home tab lately (the most recent few hundred): after a decision their
    # Home tabs are republished if the call was theirs to see.
    """
    CREATE TABLE home_viewers (
        user_id   TEXT PRIMARY KEY,
        team_id   TEXT,
        opened_at TEXT NOT NULL
    )
    """,
)

SHIPPED: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8)
"""`SHIPPED[n]` takes a file from `user_version` n to n + 1."""
