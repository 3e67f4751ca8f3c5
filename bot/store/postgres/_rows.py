"""asyncpg records to the backend-neutral row models, and command tags to row counts.

What the store decides and how it words it lives in `bot.store._rules`, shared with SQLite.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..models import AuditRow, QueueItem, SessionRow, ToolCallRow

__all__ = ["audit_row", "call_row", "count", "queue_item", "session_row"]


def count(status: str) -> int:
    """Rows a statement touched, from asyncpg's command tag ("UPDATE 1", "INSERT 0 1")."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def session_row(record: Mapping[str, Any]) -> SessionRow:
    return SessionRow.model_validate(dict(record))


def call_row(record: Mapping[str, Any]) -> ToolCallRow:
    return ToolCallRow.model_validate(dict(record))


def queue_item(record: Mapping[str, Any]) -> QueueItem:
    return QueueItem.model_validate(dict(record))


def audit_row(record: Mapping[str, Any]) -> AuditRow:
    return AuditRow.model_validate(dict(record))
