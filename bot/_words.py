"""Counting in words people read: "1 approval", "2 runs", never "run(s)"."""

from __future__ import annotations

__all__ = ["count", "count_verb"]


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for exactly one: count(2, "run") == "2 runs"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def count_verb(n: int, noun: str, singular_verb: str, plural_verb: str) -> str:
    """count(...) with its verb agreeing: count_verb(1, "run", "is", "are") == "1 run is"."""
    return f"{count(n, noun)} {singular_verb if n == 1 else plural_verb}"
