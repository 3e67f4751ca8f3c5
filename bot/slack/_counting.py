"""A Web API client that reports every failed call by its method name (metrics), so that no
caller has to remember to count its own errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

__all__ = ["CountingWebClient"]


class CountingWebClient(AsyncWebClient):
    """`AsyncWebClient` calling `on_error(method)` when Slack answers `ok: false` or cannot be
    reached (after slack_sdk's own retries), before the error propagates as usual."""

    def __init__(self, *, on_error: Callable[[str], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_error = on_error

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        try:
            return await super().api_call(api_method, **kwargs)
        except (SlackApiError, aiohttp.ClientError, TimeoutError):
            self._on_error(api_method)
            raise
