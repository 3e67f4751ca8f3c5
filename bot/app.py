"""`create_app(settings, deps)`: the Bolt app, with its listeners registered per kind."""

from __future__ import annotations

import logging

from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from . import listeners
from .deps import Deps
from .runner import Runner
from .settings import Settings

__all__ = ["create_app"]


def create_app(settings: Settings, deps: Deps) -> AsyncApp:
    """Build the app. Its Web API client talks to `SLACK_API_URL` and retries rate limits."""
    client = AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(),
        base_url=settings.slack_api_url,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),
        ],
        logger=logging.getLogger("opsgate.slack"),
        session=deps.slack_http,
    )
    secret = settings.slack_signing_secret
    app = AsyncApp(
        client=client,
        signing_secret=secret.get_secret_value() if secret else "",
        logger=logging.getLogger("opsgate.bolt"),
    )
    runner = Runner(deps, client)
    deps.runner = runner
    listeners.register(app, runner)
    return app
