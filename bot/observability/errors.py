"""The package's errors: one branch of the bot's exception tree, under `bot.errors.BotError`.

Catch `ObservabilityError` for anything `bot.observability` raises on purpose.
"""

from __future__ import annotations

from bot.errors import BotError

__all__ = ["HealthServerError", "LogSettingError", "ObservabilityError"]


class ObservabilityError(BotError):
    """Base of every error this package raises on purpose. Messages are one line."""


class LogSettingError(ObservabilityError, ValueError):
    """`OPSGATE_LOG_FORMAT` or `OPSGATE_LOG_LEVEL` has a value we do not know."""


class HealthServerError(ObservabilityError, OSError):
    """The health and metrics server could not listen (the port is taken, or not ours)."""
