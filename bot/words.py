"""Words for numbers: counts ("3 runs"), and durations as people write them in the policy
file: "90s", "15m", "2h", "1d", "1h30m".

A small grammar of our own rather than ISO 8601 ("PT15M"), because the policy file is written by
hand and read back on Slack cards; `format_duration` gives the same spelling back.
"""

from __future__ import annotations

import re
from datetime import timedelta

__all__ = [
    "count",
    "count_verb",
    "format_duration",
    "parse_duration",
]


_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_WHOLE = re.compile(r"(?:\d+[dhms])+")
_PART = re.compile(r"(\d+)([dhms])")


def parse_duration(text: str) -> timedelta:
    """Parse "90s", "15m", "2h", "1d" or a sum such as "1h30m"; raise `ValueError` otherwise."""
    spelled = text.strip().lower()
    if not _WHOLE.fullmatch(spelled):
        raise ValueError(
            f"{text!r} is not a duration; write a number and a unit (s, m, h, d), "
            'e.g. "90s", "15m", "2h", "1d" or "1h30m"'
        )
    seconds = sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _PART.findall(spelled))
    return timedelta(seconds=seconds)


def format_duration(value: timedelta, *, approximate: bool = False) -> str:
    """The shortest spelling `parse_duration` reads back: 5400s -> "1h30m", 0 -> "0s".

    `approximate=True` is for a span measured on a clock rather than written by hand (the time
    left when a card was posted): within 5 seconds of a whole minute it is rounded to it, so a
    card posted a moment after the pause still says "15m", not "14m58s".
    """
    remaining = max(0, round(value.total_seconds()))
    if approximate and remaining >= 60 and (remaining % 60 <= 5 or remaining % 60 >= 55):
        remaining = round(remaining / 60) * 60
    parts: list[str] = []
    for unit, size in _UNIT_SECONDS.items():
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


# -- words ---------------------------------------------------------------------------------------
# Counting in words people read: "1 approval", "2 runs", never "run(s)".


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for exactly one: count(2, "run") == "2 runs"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def count_verb(n: int, noun: str, singular_verb: str, plural_verb: str) -> str:
    """count(...) with its verb agreeing: count_verb(1, "run", "is", "are") == "1 run is"."""
    return f"{count(n, noun)} {singular_verb if n == 1 else plural_verb}"
