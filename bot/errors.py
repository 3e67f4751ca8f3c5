"""The one exception tree of the `bot` package: catch `BotError` for anything the bot raises."""

from __future__ import annotations

__all__ = ["BotError", "SettingsError"]


class BotError(Exception):
    """Base of every error the bot raises on purpose."""


class SettingsError(BotError):
    """A setting is missing or malformed. The message is one line: what, and where to get it.

    It never contains a secret's value, so it is safe to print and to log.
    """
