"""Bounds on what a run posts that it does not control: a provider's error text can be a whole
HTML page or a 40,000-character dump, and would be posted whole (and split over messages)."""

from __future__ import annotations

__all__ = ["ERROR_CHARS", "cut_error"]

ERROR_CHARS = 1_000
"""The most of an error's text shown in a thread; the log keeps the whole of it."""


def cut_error(text: str | None, limit: int = ERROR_CHARS) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters cut; see the bot's log)"
