"""The policy package's error, a branch of the bot's one exception tree."""

from __future__ import annotations

from bot.errors import BotError

__all__ = ["PolicyError"]


class PolicyError(BotError):
    """The policy file is unusable. The message names the file and what is wrong with it."""
