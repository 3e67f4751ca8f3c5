"""The Bolt app: its Web API client, the Slack `ThreadOutput` on it, and its listeners.

Built in this order by the caller (see `bot.server`), so that nothing points back:
`slack_client` → `SlackThreadOutput(client)` → the run service (`bot.wiring.run_service`, given
the output and `group_members(client)`) → `create_app(...)`, which registers the listeners that
call that service.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from ..approvals import FetchMembers
from ..policy import Policy
from ..runs.service import RunService
from ..settings import Settings
from . import listeners
from ._counting import CountingWebClient
from .output import SlackThreadOutput

__all__ = ["create_app", "group_members", "slack_client"]


def slack_client(
    settings: Settings,
    session: aiohttp.ClientSession | None,
    *,
    on_error: Callable[[str], None] | None = None,
) -> AsyncWebClient:
    """The Web API client: talks to `SLACK_API_URL` over `session` and retries rate limits;
    `on_error(method)` hears of every call that failed (metrics)."""
    return CountingWebClient(
        on_error=on_error or (lambda method: None),
        token=settings.slack_bot_token.get_secret_value(),
        base_url=settings.slack_api_url,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),
        ],
        logger=logging.getLogger("opsgate.slack"),
        session=session,
        timeout=int(max(1, settings.opsgate_slack_timeout)),
    )


def group_members(client: AsyncWebClient) -> FetchMembers:
    """How the approvals rules learn who is in a user group (`usergroups.users.list`)."""

    async def members(group_id: str) -> Iterable[str]:
        response = await client.usergroups_users_list(usergroup=group_id)
        users: list[Any] = response.get("users") or []
        return [str(user) for user in users]

    return members


def create_app(
    settings: Settings,
    service: RunService,
    output: SlackThreadOutput,
    *,
    policy: Policy,
) -> AsyncApp:
    """The app on `output`'s client, its listeners calling `service`.
    Each event and each slash request is saved once, deduplicated in the same transaction, by
    the listeners' intake middleware before the acknowledgement (`bot.runs.inbox`).
    """
    secret = settings.slack_signing_secret
    app = AsyncApp(
        client=output.client,
        signing_secret=secret.get_secret_value() if secret else "",
        logger=logging.getLogger("opsgate.bolt"),
    )
    listeners.register(app, service, output, policy=policy)
    return app
