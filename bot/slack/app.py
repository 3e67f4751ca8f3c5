"""The Bolt app: its Web API client, the Slack `ThreadOutput` on it, and its listeners.

Built in this order by the caller (see `bot.server`), so that nothing points back:
`slack_client` → `SlackThreadOutput(client)` → the run service (`bot.wiring.run_service`, given
the output and `group_members(client)`) → `create_app(...)`, which registers the listeners that
call that service.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from ..approvals import FetchMembers
from ..policy import Policy
from ..runs.service import RunService
from ..settings import Settings
from . import intake, listeners
from .output import SlackThreadOutput
from .pacing import Pacer

__all__ = [
    "CountingWebClient",
    "channel_members",
    "create_app",
    "group_members",
    "slack_client",
    "wait_for_listeners",
]

logger = logging.getLogger("opsgate.slack")


def slack_client(
    settings: Settings,
    session: aiohttp.ClientSession | None,
    *,
    on_error: Callable[[str], None] | None = None,
    pacer: Pacer | None = None,
) -> AsyncWebClient:
    """The Web API client: talks to `SLACK_API_URL` over `session`, paced at Slack's tiers and
    waiting out rate limits (`bot.slack.pacing`: a 429 is never a dropped write);
    `on_error(method)` hears of every call that failed (metrics)."""
    return CountingWebClient(
        on_error=on_error or (lambda method: None),
        pacer=pacer or Pacer(),
        token=settings.slack_bot_token.get_secret_value(),
        base_url=settings.slack_api_url,
        retry_handlers=[AsyncConnectionErrorRetryHandler(max_retry_count=2)],
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


def channel_members(client: AsyncWebClient) -> FetchMembers:
    """Who is in a channel (`conversations.members`, every page): the Home tab lists a call
    where anyone in its channel approves only to the channel's members."""

    async def members(channel_id: str) -> Iterable[str]:
        users: list[str] = []
        cursor = ""
        while True:
            response = await client.conversations_members(
                channel=channel_id, cursor=cursor or None, limit=1000
            )
            users.extend(str(user) for user in response.get("members") or [])
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return users

    return members


def create_app(
    settings: Settings,
    service: RunService,
    output: SlackThreadOutput,
    *,
    policy: Policy,
) -> AsyncApp:
    """The app on `output`'s client, its listeners calling `service`.
    Every request of every kind is saved once, deduplicated in the same transaction, by the one
    intake middleware before any listener acknowledges it (`bot.slack.intake`).
    """
    secret = settings.slack_signing_secret
    with _no_env_token():
        app = AsyncApp(
            client=output.client,
            signing_secret=secret.get_secret_value() if secret else "",
            logger=logging.getLogger("opsgate.bolt"),
        )
    # Before any listener: the one intake (a message to act on, or a `/opsgate` request, is
    # saved as its own row).
    intake.install(app, service, output, row_of=listeners.row_of(service, policy))
    listeners.register(app, service, output, policy=policy)
    return app


@contextlib.contextmanager
def _no_env_token() -> Iterator[None]:
    """Bolt takes a missing `token` from `SLACK_BOT_TOKEN` and then, with a `client` given too,
    warns at every start that the token is unused. The client carries the token (from the
    settings); the app is built without the variable, which is put back at once. Building is
    synchronous: no other task runs in between."""
    saved = os.environ.pop(_TOKEN_VARIABLE, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[_TOKEN_VARIABLE] = saved


_TOKEN_VARIABLE = "SLACK_BOT_TOKEN"


# -- counting ------------------------------------------------------------------------------------
# A Web API client that reports every failed call by its method name (metrics), so that no
# caller has to remember to count its own errors.


class CountingWebClient(AsyncWebClient):
    """`AsyncWebClient` whose every call waits its turn at `pacer` (429s waited out, see
    `bot.slack.pacing`), calling `on_error(method)` when Slack answers `ok: false` or cannot be
    reached (after the retries), before the error propagates as usual."""

    def __init__(
        self, *, on_error: Callable[[str], None], pacer: Pacer | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._on_error = on_error
        self.pacer = pacer or Pacer()

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        send = functools.partial(super().api_call, api_method, **kwargs)
        try:
            return await self.pacer.call(api_method, _channel_of(kwargs), send)
        except (SlackApiError, aiohttp.ClientError, TimeoutError):
            self._on_error(api_method)
            raise


def _channel_of(kwargs: dict[str, Any]) -> str | None:
    """The `channel` argument of a Web API call, wherever slack_sdk put it."""
    for part in ("json", "data", "params"):
        value = kwargs.get(part)
        if isinstance(value, dict) and value.get("channel"):
            return str(value["channel"])
    return None


# -- inflight ------------------------------------------------------------------------------------
# Waiting for Bolt listeners still at work after their request was acknowledged.
#
# Bolt acknowledges an event (HTTP 200) and then runs its listener in a task of its own. On
# shutdown those tasks must finish before the store closes, or an acknowledged mention would be
# dropped; Bolt keeps no list of them, so they are found by their coroutine's name.


_BOLT_TASK = "run_ack_function_asynchronously"


async def wait_for_listeners(timeout: float) -> int:
    """Wait up to `timeout` seconds for Bolt's listener tasks; returns how many were running."""
    this = asyncio.current_task()
    running = [
        task
        for task in asyncio.all_tasks()
        if task is not this and _BOLT_TASK in repr(task.get_coro())
    ]
    if running:
        await asyncio.wait(running, timeout=timeout)
    return len(running)
