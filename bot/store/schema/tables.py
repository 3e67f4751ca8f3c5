"""Tables the common line of migrations creates whole, kept apart from the steps that add them.

`migrations.py` reads as the order of versions; the longer CREATE TABLE texts those steps run
are here, each the same on both databases unless its name says which.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..chain import record_key_fingerprint
from ..db import Tx

__all__ = [
    "EXPORT_POSTGRES",
    "EXPORT_SQLITE",
    "EXPORT_START",
    "OUTBOX_INDEXES",
    "V18",
    "budgets_table",
    "ladder_tables",
    "outbox_table",
    "pins_table",
    "plane_tables",
]

# The audit export's durable cursor: the last seq the webhook acknowledged, and which replica
# delivers (a lease, so replicas do not post the same rows side by side).
EXPORT_SQLITE = """
    CREATE TABLE audit_export (
        singleton     INTEGER PRIMARY KEY CHECK (singleton = 1),
        delivered_seq INTEGER NOT NULL,
        holder        TEXT,
        held_until    TEXT
    )
"""
EXPORT_POSTGRES = """
    CREATE TABLE audit_export (
        singleton     integer PRIMARY KEY CHECK (singleton = 1),
        delivered_seq bigint NOT NULL,
        holder        text,
        held_until    timestamptz
    )
"""
EXPORT_START = "INSERT INTO audit_export (singleton, delivered_seq) VALUES (1, 0)"

V18: tuple[str | Callable[[Tx], Awaitable[None]], ...] = (
    record_key_fingerprint,
    "CREATE TABLE feedback_votes (session_id TEXT NOT NULL, message_ts TEXT NOT NULL, "
    "user_id TEXT NOT NULL, value TEXT NOT NULL CHECK (value IN ('good', 'bad')), "
    "PRIMARY KEY (session_id, message_ts, user_id))",
    "CREATE TABLE run_timelines (session_id TEXT PRIMARY KEY, ts TEXT NOT NULL, "
    "shown TEXT NOT NULL)",
)
"""Version 18's tables, the same on both databases (text columns only)."""


def pins_table(time: str) -> str:
    return f"""
    CREATE TABLE mcp_tool_pins (
        server TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL, definition TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pinned','quarantined')),
        listed_digest TEXT, listed_definition TEXT, pinned_at {time} NOT NULL,
        changed_at {time}, accepted_by TEXT, PRIMARY KEY (server, tool)
    )
    """


def ladder_tables(integer: str, time: str) -> tuple[str, ...]:
    """A waiting call's escalation steps passed and reminders sent; who delegates to whom."""
    return (
        f"ALTER TABLE tool_calls ADD COLUMN escalation_step {integer} NOT NULL DEFAULT 0",
        f"ALTER TABLE tool_calls ADD COLUMN reminders_sent {integer} NOT NULL DEFAULT 0",
        f"CREATE TABLE delegations (delegator TEXT PRIMARY KEY, delegate TEXT NOT NULL,"
        f" until {time} NOT NULL, reason TEXT, created_at {time} NOT NULL)",
    )


def plane_tables(text: str, moment: str) -> tuple[str, ...]:
    """Outside requests (`bot.store.plane`) and the receipts' signing key; `text` and `moment`
    are the database's text and timestamp types."""
    return (
        f"""
        CREATE TABLE plane_requests (
            id              {text} PRIMARY KEY,
            client          {text} NOT NULL,
            idempotency_key {text},
            tool            {text} NOT NULL,
            arguments       {text} NOT NULL,
            digest          {text} NOT NULL,
            channel_id      {text} NOT NULL,
            requester       {text},
            reason          {text},
            state           {text} NOT NULL,
            rule            {text},
            session_id      {text},
            created_at      {moment} NOT NULL,
            opening_at      {moment} NOT NULL,
            UNIQUE (client, idempotency_key)
        )
        """,
        "CREATE INDEX plane_requests_by_session ON plane_requests (session_id)",
        f"""
        CREATE TABLE plane_keys (
            name       {text} PRIMARY KEY,
            pem        {text} NOT NULL,
            created_at {moment} NOT NULL
        )
        """,
    )


def budgets_table(text: str, real: str) -> str:
    """Slack's buckets shared by the replicas (`SlackBudgets`): tokens left, when they were
    counted and until when Slack said wait, in the pacer's seconds."""
    return (
        f"CREATE TABLE slack_budgets (bucket {text} PRIMARY KEY, tokens {real} NOT NULL,"
        f" at {real} NOT NULL, paused_until {real} NOT NULL)"
    )


def outbox_table(text: str, integer: str, json: str, time: str) -> str:
    """Every write the bot owes Slack (`bot.store.outbox`), with its lease and its tries."""
    return f"""
        CREATE TABLE outbox (
            id            {text} PRIMARY KEY,
            priority      {integer} NOT NULL,
            method        {text} NOT NULL,
            channel_id    {text},
            key           {text},
            params        {json} NOT NULL,
            meta          {json} NOT NULL,
            created_at    {time} NOT NULL,
            not_before    {time} NOT NULL,
            claimed_by    {text},
            claimed_until {time},
            attempts      {integer} NOT NULL DEFAULT 0,
            last_error    {text}
        )
    """


OUTBOX_INDEXES = (
    "CREATE INDEX outbox_due ON outbox (priority, created_at)",
    "CREATE INDEX outbox_key ON outbox (key)",
)
