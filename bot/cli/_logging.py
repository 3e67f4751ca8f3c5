"""Logging for the commands: configured once the settings are read (`OPSGATE_LOG_FORMAT`,
`OPSGATE_LOG_LEVEL`), with `-v` forcing DEBUG and the settings' secrets masked."""

from __future__ import annotations

from ..observability import configure_logging
from ..settings import Settings

__all__ = ["log_from_settings"]


def log_from_settings(settings: Settings, *, verbose: bool, floor: str | None = None) -> None:
    """`floor` raises the level for commands whose own output is the point (`chat`): their
    INFO lines would land between a prompt and its answer."""
    level: str = "DEBUG" if verbose else settings.opsgate_log_level
    if floor is not None and not verbose and _rank(level) < _rank(floor):
        level = floor
    secrets = [
        secret.get_secret_value()
        for secret in (
            settings.slack_bot_token,
            settings.slack_app_token,
            settings.slack_signing_secret,
            settings.openai_api_key,
        )
        if secret is not None and secret.get_secret_value()
    ]
    configure_logging(settings.opsgate_log_format, level, secrets=secrets)


def _rank(level: str) -> int:
    return ("DEBUG", "INFO", "WARNING", "ERROR").index(level)
