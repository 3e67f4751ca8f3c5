"""Signing in to Slack at start-up: `auth.test` with the bot token, and in Socket Mode the first
connection with the app-level token.

A token Slack refuses stops the start (`SignInRefused`, exit status 2) in the words `opsgate
check` prints for it; a Slack that cannot be reached (refused connection, timeout, 5xx) is
asked again with a capped backoff, one log line per try, and `/readyz` says why it is not
ready meanwhile (`SignIn.check`). Nothing here waits for a stop: the server cancels a start
that is told to stop (`bot.server`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from ..errors import BotError

__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_FIRST",
    "SignIn",
    "SignInRefused",
    "auth_refused",
    "connect_socket_mode",
    "connections_refused",
    "sign_in",
    "socket_mode_handler",
    "unreachable",
]

logger = logging.getLogger("opsgate.slack")

BACKOFF_FIRST: Final = 1.0
BACKOFF_CAP: Final = 30.0
"""Seconds between tries: 1, 2, 4 … up to 30, then 30 each time."""

TRANSIENT: Final = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
"""Slack's own `ok: false` errors that say "not now" rather than "not you"."""

T = TypeVar("T")


class SignInRefused(BotError):
    """Slack refused a token at start-up; the message is `opsgate check`'s line for it."""


def auth_refused(error: str) -> str:
    """What `opsgate check` and a refused start say of a bot token Slack rejects."""
    return f"slack: auth.test said {error!r}; check SLACK_BOT_TOKEN"


def connections_refused(error: str) -> str:
    """… and of an app-level token `apps.connections.open` rejects."""
    return f"slack: apps.connections.open said {error!r}; check SLACK_APP_TOKEN"


def unreachable(url: str, exc: BaseException) -> str:
    return f"slack: cannot reach {url} ({type(exc).__name__})"


class SignIn:
    """Where the sign-in stands, for `/readyz`: not ready until it is done."""

    def __init__(self) -> None:
        self.reason: str | None = "signing in to Slack"

    async def check(self) -> str | None:
        return self.reason

    def done(self) -> None:
        self.reason = None


async def _keep_trying(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    url: str,
    refused: Callable[[str], str],
    state: SignIn,
) -> T:
    """`call()` until Slack answers; a refusal raises `SignInRefused`, anything that says
    Slack is not there waits (1 s doubling to 30 s) and tries again."""
    delay, tries = BACKOFF_FIRST, 0
    while True:
        tries += 1
        try:
            return await call()
        except SlackApiError as exc:
            status, error = _answer_of(exc)
            if status < 500 and error not in TRANSIENT:
                raise SignInRefused(refused(error)) from None
            reason = f"{what}: HTTP {status} {error}"
        except (SlackClientError, aiohttp.ClientError, TimeoutError, OSError) as exc:
            reason = unreachable(url, exc)[len("slack: ") :]
        state.reason = f"not signed in to Slack yet ({reason})"
        logger.warning(
            "Slack is not reachable (%s, try %d); trying again in %g s", reason, tries, delay
        )
        await asyncio.sleep(delay)
        delay = min(delay * 2, BACKOFF_CAP)


def _answer_of(exc: SlackApiError) -> tuple[int, str]:
    """The HTTP status and Slack's error code; an answer that is not Slack's JSON (a proxy's
    HTML page) leaves slack_sdk's raw response on the error, with neither."""
    response: Any = exc.response
    status = getattr(response, "status_code", None) or getattr(response, "status", 0)
    try:
        error = response.get("error")
    except (AttributeError, ValueError):
        error = None
    return int(status or 0), str(error or "an answer that is not Slack's")


def _plain_client(app: AsyncApp, **kwargs: Any) -> AsyncWebClient:
    """A client on the app's URL and session without slack_sdk's own retries: each try is one
    request and one log line here."""
    client = app.client
    return AsyncWebClient(
        base_url=client.base_url, session=client.session, timeout=client.timeout, **kwargs
    )


async def sign_in(app: AsyncApp, state: SignIn) -> None:
    """`auth.test` until Slack answers it. Its answer also warms Bolt's single-workspace
    authorization, which otherwise calls `auth.test` for every request until one has answered
    (the burst right after a start would each ask it). Bolt offers no public way to warm it."""
    client = _plain_client(app, token=app.client.token)
    result = await _keep_trying(
        client.auth_test,
        what="auth.test",
        url=client.base_url,
        refused=auth_refused,
        state=state,
    )
    state.reason = "signed in to Slack, starting"
    for middleware in app._async_middleware_list:
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            middleware.auth_test_result = result


class _OneLine(logging.Filter):
    """slack_sdk logs each failed Socket Mode connection with its traceback; one line is
    enough (the reason is in the message)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


def socket_mode_handler(app: AsyncApp, app_token: str) -> AsyncSocketModeHandler:
    """Bolt's Socket Mode handler, logging to `opsgate.slack.socket_mode` one line a failure."""
    socket_logger = logging.getLogger("opsgate.slack.socket_mode")
    if not any(isinstance(f, _OneLine) for f in socket_logger.filters):
        socket_logger.addFilter(_OneLine())
    return AsyncSocketModeHandler(app, app_token, logger=socket_logger)


async def connect_socket_mode(
    handler: AsyncSocketModeHandler, state: SignIn, *, timeout: float
) -> None:
    """The first Socket Mode connection: `apps.connections.open` until Slack answers (a refused
    app token stops the start), then the WebSocket, within `timeout` or tried again. Later
    reconnections are slack_sdk's."""
    state.reason = "connecting to Slack (Socket Mode)"
    client = handler.client
    web = _plain_client(handler.app)

    async def open_url() -> str:
        response = await web.apps_connections_open(app_token=client.app_token)
        return str(response["url"])

    async def connect() -> None:
        client.wss_uri = await open_url()
        try:
            async with asyncio.timeout(timeout):
                await client.connect()  # type: ignore[no-untyped-call]
        except TimeoutError:
            client.wss_uri = None  # single-use: ask for a new one
            raise

    await _keep_trying(
        connect,
        what="apps.connections.open",
        url=web.base_url,
        refused=connections_refused,
        state=state,
    )
    state.done()
