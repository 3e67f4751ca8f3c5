"""The approval plane's tables (migration 17), one text for both databases: outside requests
(`bot.store.plane`) and the receipts' signing key."""

from __future__ import annotations

__all__ = ["statements"]


def statements(text: str, moment: str) -> tuple[str, ...]:
    """The statements, with `text` and `moment` the database's text and timestamp types."""
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
