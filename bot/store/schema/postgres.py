"""PostgreSQL's versions 1 to 7 as they shipped (the `schema_version` table says how far).

Frozen: from version 9 on, `bot.store.schema` holds one line of migrations for both databases
(PostgreSQL has no version 8: its 7 is followed by the common 9). The columns mirror SQLite's,
plus the replica bookkeeping: `instances` (one lease per running replica) and the
`instance_id` of whoever runs an `executing` call, a `running` session or a `started` item.
"""

from __future__ import annotations

__all__ = ["SHIPPED", "WAKE_CHANNEL"]

_V1 = (
    """
    CREATE TABLE instances (
        id            text PRIMARY KEY,
        name          text,
        started_at    timestamptz NOT NULL,
        heartbeat_at  timestamptz NOT NULL,
        lease_seconds double precision NOT NULL CHECK (lease_seconds > 0)
    )
    """,
    """
    CREATE TABLE sessions (
        id             text PRIMARY KEY,
        team_id        text NOT NULL,
        channel_id     text NOT NULL,
        thread_ts      text NOT NULL,
        state          text NOT NULL DEFAULT 'idle'
                       CHECK (state IN ('idle','running','awaiting_approval','resuming','failed')),
        requester      text,
        error          text,
        batch_id       text,
        last_calls_seq integer,
        instance_id    text,
        created_at     timestamptz NOT NULL,
        updated_at     timestamptz NOT NULL,
        UNIQUE (team_id, channel_id, thread_ts)
    )
    """,
    "CREATE INDEX sessions_by_state ON sessions (state)",
    "CREATE INDEX sessions_by_channel ON sessions (channel_id, state)",
    """
    CREATE TABLE messages (
        session_id text NOT NULL REFERENCES sessions (id),
        seq        integer NOT NULL,
        body       text NOT NULL,
        created_at timestamptz NOT NULL,
        PRIMARY KEY (session_id, seq)
    )
    """,
    """
    CREATE TABLE tool_calls (
        id             text PRIMARY KEY,
        session_id     text NOT NULL REFERENCES sessions (id),
        batch_id       text,
        message_seq    integer NOT NULL,
        position       integer NOT NULL,
        call_id        text NOT NULL,
        name           text NOT NULL,
        arguments      text NOT NULL,
        digest         text NOT NULL,
        needs_approval boolean NOT NULL,
        status         text NOT NULL
                       CHECK (status IN ('pending','approved','rejected','expired',
                                         'executing','done','interrupted','cancelled')),
        requested_by   text,
        decided_by     text,
        decided_team   text,
        decided_at     timestamptz,
        reason         text,
        result         text,
        is_error       boolean,
        card_channel   text,
        card_ts        text,
        expires_at     timestamptz,
        ttl            text,
        approvals      text[] NOT NULL DEFAULT '{}',
        instance_id    text,
        created_at     timestamptz NOT NULL,
        reminded_at    timestamptz,
        started_at     timestamptz,
        finished_at    timestamptz,
        UNIQUE (session_id, message_seq, call_id)
    )
    """,
    "CREATE INDEX tool_calls_by_batch ON tool_calls (batch_id, position)",
    "CREATE INDEX tool_calls_by_status ON tool_calls (status, expires_at)",
    """
    CREATE TABLE audit (
        id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at         timestamptz NOT NULL,
        event      text NOT NULL,
        actor      text,
        session_id text,
        call_id    text,
        details    jsonb NOT NULL DEFAULT '{}'
    )
    """,
    "CREATE INDEX audit_by_time ON audit (at)",
    """
    CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the audit log is append-only: rows cannot be %',
            lower(TG_OP) || 'd';
    END
    $$
    """,
    """
    CREATE TRIGGER audit_no_change BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only()
    """,
    """
    CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only()
    """,
    """
    CREATE TABLE seen_events (
        event_id text PRIMARY KEY,
        seen_at  timestamptz NOT NULL
    )
    """,
    "CREATE INDEX seen_events_by_time ON seen_events (seen_at)",
    """
    CREATE TABLE run_queue (
        id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id  text NOT NULL REFERENCES sessions (id),
        channel_id  text NOT NULL,
        requester   text NOT NULL,
        text        text NOT NULL,
        message_ts  text,
        state       text NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued','started','done','cancelled')),
        history_seq integer,
        instance_id text,
        enqueued_at timestamptz NOT NULL,
        started_at  timestamptz,
        finished_at timestamptz
    )
    """,
    "CREATE INDEX run_queue_by_channel ON run_queue (state, channel_id, id)",
    "CREATE INDEX run_queue_by_session ON run_queue (session_id, state)",
)

_V2: tuple[str, ...] = (
    # Compaction summaries of long threads (see the SQLite schema's version 4).
    """
    CREATE TABLE summaries (
        session_id text NOT NULL REFERENCES sessions (id),
        upto       integer NOT NULL CHECK (upto > 0),
        kind       text NOT NULL CHECK (kind IN ('summary', 'note')),
        text       text NOT NULL,
        created_at timestamptz NOT NULL,
        PRIMARY KEY (session_id, upto)
    )
    """,
)

_V3: tuple[str, ...] = (
    # Edit before approving, and time-boxed allowances (see the SQLite schema's version 5).
    "ALTER TABLE tool_calls ADD COLUMN edited_arguments text",
    "ALTER TABLE tool_calls ADD COLUMN edited_digest text",
    "ALTER TABLE tool_calls ADD COLUMN edited_by text",
    """
    CREATE TABLE allowances (
        id         text PRIMARY KEY,
        channel_id text NOT NULL,
        tool       text NOT NULL,
        shape      text NOT NULL,
        label      text NOT NULL,
        granted_by text NOT NULL,
        ledger_id  text NOT NULL,
        created_at timestamptz NOT NULL,
        expires_at timestamptz NOT NULL,
        revoked_at timestamptz,
        revoked_by text
    )
    """,
    "CREATE INDEX allowances_by_channel ON allowances (channel_id, tool, expires_at)",
)

_V4: tuple[str, ...] = (
    # As SQLite's version 6: what each card shows now, and why it may not be approved.
    "ALTER TABLE tool_calls ADD COLUMN card_drawn text",
    "UPDATE tool_calls SET card_drawn = 'before-v3' WHERE card_ts IS NOT NULL "
    "AND status <> 'pending'",
    "ALTER TABLE tool_calls ADD COLUMN card_locked text",
)


_V5: tuple[str, ...] = (
    # Deliveries Slack got a 200 for, saved before the 200 (docs/architecture.md); a row
    # left by a replica whose lease lapsed is claimed by one survivor.
    """
    CREATE TABLE inbox (
        id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind        text NOT NULL CHECK (kind IN ('message','slash')),
        payload     jsonb NOT NULL,
        state       text NOT NULL DEFAULT 'received'
                    CHECK (state IN ('received','claimed','done')),
        instance_id text,
        received_at timestamptz NOT NULL,
        done_at     timestamptz
    )
    """,
    "CREATE INDEX inbox_by_state ON inbox (state, id)",
)

_V6: tuple[str, ...] = (
    # Who opened the Home tab lately (see the SQLite schema's version 8).
    """
    CREATE TABLE home_viewers (
        user_id   text PRIMARY KEY,
        team_id   text,
        opened_at timestamptz NOT NULL
    )
    """,
)

WAKE_CHANNEL = "opsgate_wake"
"""The LISTEN/NOTIFY channel on which replicas wake each other (see `_V7`)."""

_V7: tuple[str, ...] = (
    # Every change another replica may have to act on notifies, on commit, whoever made it:
    # a decided or expired gated call (its batch may resume), a run queued or put back, and a
    # session leaving running/resuming (a queue slot freed). `origin` is the writer's
    # application_name, so a replica can skip what it did itself.
    f"""
    CREATE FUNCTION opsgate_wake() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        key text;
    BEGIN
        IF TG_ARGV[0] = 'resume' THEN
            key := NEW.session_id;
        ELSE
            key := NEW.channel_id;
        END IF;
        PERFORM pg_notify('{WAKE_CHANNEL}', json_build_object(
            'kind', TG_ARGV[0], 'key', key,
            'origin', current_setting('application_name'))::text);
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER wake_on_decision AFTER UPDATE OF status ON tool_calls
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status IN ('approved','rejected','expired'))
    EXECUTE FUNCTION opsgate_wake('resume')
    """,
    """
    CREATE TRIGGER wake_on_enqueue AFTER INSERT ON run_queue
    FOR EACH ROW WHEN (NEW.state = 'queued') EXECUTE FUNCTION opsgate_wake('queue')
    """,
    """
    CREATE TRIGGER wake_on_requeue AFTER UPDATE OF state ON run_queue
    FOR EACH ROW WHEN (OLD.state <> 'queued' AND NEW.state = 'queued')
    EXECUTE FUNCTION opsgate_wake('queue')
    """,
    """
    CREATE TRIGGER wake_on_slot AFTER UPDATE OF state ON sessions
    FOR EACH ROW WHEN (OLD.state IN ('running','resuming')
                       AND NEW.state NOT IN ('running','resuming'))
    EXECUTE FUNCTION opsgate_wake('queue')
    """,
)

SHIPPED: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7)
"""`SHIPPED[n]` takes a database from schema version n to n + 1."""
