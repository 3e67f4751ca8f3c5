"""How the store spells time: aware UTC datetimes in, fixed-width ISO text in the file.

Fixed width (always microseconds, always `+00:00`) makes the text sort like the instants it
names, so `expires_at <= ?` and `at >= ?` can be plain SQL comparisons on indexed columns.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["aware", "from_db", "to_db", "utc_now"]


def utc_now() -> datetime:
    """The default clock of a store."""
    return datetime.now(UTC)


def aware(moment: datetime) -> datetime:
    """A naive datetime is taken to be UTC (the store never deals in local time)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def to_db(moment: datetime) -> str:
    return aware(moment).astimezone(UTC).isoformat(timespec="microseconds")


def from_db(text: str) -> datetime:
    return datetime.fromisoformat(text)
