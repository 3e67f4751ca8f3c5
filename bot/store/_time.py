"""How the store spells time: aware UTC datetimes in, fixed-width ISO text in the file.

Fixed width (always microseconds, always `+00:00`) makes the text sort like the instants it
names, so `expires_at <= ?` and `at >= ?` can be plain SQL comparisons on indexed columns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["aware", "format_duration", "from_db", "to_db", "utc_now"]


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


def format_duration(span: timedelta) -> str:
    """A short human spelling of a time limit ("15m", "2h", "1d", "90s", "1h30m").

    Used to tell the model how long a gated call waited before it expired.
    """
    seconds = max(0, round(span.total_seconds()))
    if seconds >= 60 and (seconds % 60 <= 5 or seconds % 60 >= 55):
        # A card posted a few seconds after the pause still says "15m", not "15m2s".
        seconds = round(seconds / 60) * 60
    parts: list[str] = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
