"""The Bolt app: its Web API client, the app itself, its listeners and the tasks they run in.

Built in this order by `bot.wiring.slack_bot`, so that nothing points back: `slack_client` →
the outbox and `SlackThreadOutput` on it → `bolt_app(...)` (Bolt's own handlers for a
listener's start and end: `ListenerTasks` and the intake's `MarkDone`) → the run service
(`bot.wiring.run_service`, given the output, `group_members(client)` and the app's replay) →
`register(...)`, the intake and the listeners that call that service.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, cast

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.listener.async_listener_start_handler import AsyncListenerStartHandler
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from ..approvals import FetchMembers
from ..approvals.pagerduty import LookupEmail
from ..policy import Policy
from ..runs.service import RunService
from ..settings import Settings
from . import intake, listeners
from .output import SlackThreadOutput
from .pacing import Pacer

__all__ = [
    "CountingWebClient",
    "ListenerTasks",
    "bolt_app",
    "channel_members",
    "group_members",
    "register",
    "slack_client",
    "user_by_email",
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


def user_by_email(client: AsyncWebClient) -> LookupEmail:
    """How PagerDuty's on-call email becomes a Slack user (`users.lookupByEmail`, scope
    `users:read.email`): `bot.approvals.pagerduty`."""

    async def lookup(email: str) -> str | None:
        response = await client.users_lookupByEmail(email=email)
        user = response.get("user") or {}
        return str(user["id"]) if user.get("id") else None

    return lookup


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


def bolt_app(
    settings: Settings,
    client: AsyncWebClient,
    *,
    done: Callable[[int], Awaitable[None]],
    tasks: ListenerTasks,
    authorize: Callable[..., Awaitable[AuthorizeResult | None]],
) -> AsyncApp:
    """The app on `client`'s URL and session, no listener yet. Each request is authorized by
    `authorize` (the sign-in's, `bot.slack.signin`), which gives it the bot token: the app's own
    client carries none, as Bolt wants of an app given `authorize`. A request's inbox row is
    marked done (`done`) when its listener ended, and every listener runs as a task `tasks`
    owns: both through Bolt's public listener runner (`AsyncApp.listener_runner`), whose start
    and completion handlers the app's constructor does not take."""
    secret = settings.slack_signing_secret
    tokenless = AsyncWebClient(
        base_url=client.base_url,
        session=client.session,
        timeout=client.timeout,
        logger=client.logger,
        retry_handlers=client.retry_handlers,
    )
    with _no_env_token():
        app = AsyncApp(
            client=tokenless,
            # Bolt takes None as "not authorized" (`AsyncCallableAuthorize`); its hint omits it.
            authorize=cast(Callable[..., Awaitable[AuthorizeResult]], authorize),
            signing_secret=secret.get_secret_value() if secret else "",
            logger=logging.getLogger("opsgate.bolt"),
        )
    runner = app.listener_runner
    runner.listener_start_handler = tasks.starting(runner.listener_start_handler)
    runner.listener_completion_handler = intake.MarkDone(done, runner.listener_completion_handler)
    return app


def register(
    app: AsyncApp, service: RunService, output: SlackThreadOutput, *, policy: Policy
) -> None:
    """The app's listeners, calling `service`. Every request of every kind is saved once,
    deduplicated in the same transaction, by the one intake middleware before any listener
    acknowledges it (`bot.slack.intake`)."""
    # Before any listener: the one intake (a message to act on, or a `/opsgate` request, is
    # saved as its own row).
    intake.install(app, service, output, row_of=listeners.row_of(service, policy))
    listeners.register(app, service, output, policy=policy)


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


# -- listener tasks ------------------------------------------------------------------------------
# Bolt acknowledges an event (HTTP 200) and then runs its listener in a task of its own, which it
# keeps no list of. On shutdown those tasks must finish before the store closes, or an
# acknowledged mention would be dropped: Bolt's listener start handler runs first thing in that
# task, and hands it to `ListenerTasks`, which owns it from then on.


class ListenerTasks:
    """The tasks Bolt's listeners run in, from their start until they end."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def starting(self, then: AsyncListenerStartHandler) -> AsyncListenerStartHandler:
        """Bolt's listener start handler: records the listener's task, then `then` (Bolt's)."""
        return _Started(self._running, then)

    @property
    def running(self) -> int:
        return len(self._running)

    async def aclose(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for the listeners still running, then cancel the rest
        and wait for them; returns how many were running."""
        running = set(self._running)
        if running:
            _, late = await asyncio.wait(running, timeout=timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        return len(running)


class _Started(AsyncListenerStartHandler):
    def __init__(self, running: set[asyncio.Task[Any]], then: AsyncListenerStartHandler) -> None:
        self.running = running
        self.then = then

    async def handle(self, request: AsyncBoltRequest, response: BoltResponse | None) -> None:
        task = asyncio.current_task()
        if task is not None and task not in self.running:
            self.running.add(task)
            task.add_done_callback(self.running.discard)
        await self.then.handle(request=request, response=response)
