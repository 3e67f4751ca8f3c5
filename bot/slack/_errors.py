"""What a Web API call can raise, and its name in Slack's words: shared by the output and the
timeline, which must not import each other."""

from __future__ import annotations

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

__all__ = ["SLACK_ERRORS", "slack_error"]

SLACK_ERRORS = (SlackClientError, aiohttp.ClientError, TimeoutError)
"""What a Web API call can raise once slack_sdk's retries are spent."""


def slack_error(exc: BaseException) -> str:
    """The Slack error code (e.g. "not_in_channel"), or the exception for transport errors."""
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error"))
    return f"{type(exc).__name__}: {exc}"
