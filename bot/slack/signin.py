"""Signing in to Slack at start-up: `auth.test` with the bot token, and in Socket Mode the first
connection with the app-level token.

A token Slack refuses stops the start (`SignInRefused`, exit status 2) in the words `opsgate
check` prints for it; a Slack that cannot be reached (refused connection, timeout, 5xx) is
asked again with a capped backoff, one log line per try, and `/readyz` says why it is not
ready meanwhile (`SignIn.check`). Nothing here waits for a stop: the server cancels a start
that is told to stop (`bot.server`).

Bolt authorizes each request through `SignIn.authorize`, given to the app's constructor
(`authorize=`): it answers from the one `auth.test` of the sign-in, so a burst right after a
start does not ask Slack once per request, as Bolt's own single-workspace authorization would
until one had answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from ..errors import SignInRefused, slack_unreachable
from ..observability import ReadinessCheck, socket_mode_check

__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_FIRST",
    "SignIn",
    "SignInRefused",
    "connect_socket_mode",
    "sign_in",
    "socket_mode_handler",
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


class SignIn:
    """Where the sign-in stands, for `/readyz`: not ready until it is done; and who the bot is
    once signed in, for Bolt's authorization of each request."""

    def __init__(self) -> None:
        self.reason: str | None = "signing in to Slack"
        self._answer: Any = None
        self._token: str | None = None
        self._connection: ReadinessCheck | None = None

    async def check(self) -> str | None:
        """Slack's readiness: why the sign-in is not done, else (Socket Mode) whether the
        connection is up."""
        if self.reason is not None or self._connection is None:
            return self.reason
        return await self._connection()

    def done(self) -> None:
        self.reason = None

    def connected(self, connection: ReadinessCheck) -> None:
        """Done, in Socket Mode: from now on Slack is ready while `connection` says so."""
        self._connection = connection
        self.reason = None

    def signed_in(self, answer: Any, token: str) -> None:
        """`auth.test`'s answer for `token`: the bot's team, bot and user ids."""
        self._answer, self._token = answer, token

    @property
    def authorize(self) -> Callable[[str | None], Awaitable[AuthorizeResult | None]]:
        """Bolt's `authorize`: the bot token and ids of the one workspace, as Bolt's
        single-workspace authorization builds them from `auth.test`. Before the sign-in there
        is none (Bolt then refuses the request; Slack's requests reach the app only after it).
        A plain function: Bolt passes the arguments its parameters name."""

        async def authorize(user_id: str | None) -> AuthorizeResult | None:
            answer, token = self._answer, self._token
            if answer is None or token is None:
                return None
            user = answer.get("user_id")
            return AuthorizeResult(
                enterprise_id=answer.get("enterprise_id"),
                team_id=answer.get("team_id"),
                bot_id=answer.get("bot_id"),
                bot_user_id=user,
                bot_token=token,
                user_id=user_id,
                bot_scopes=answer.headers.get("x-oauth-scopes"),
            )

        return authorize


async def _keep_trying(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    url: str,
    refused: Callable[[str], SignInRefused],
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
                raise refused(error) from None
            reason = f"{what}: HTTP {status} {error}"
        except (SlackClientError, aiohttp.ClientError, TimeoutError, OSError) as exc:
            reason = slack_unreachable(url, exc)[len("slack: ") :]
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


def _plain_client(client: AsyncWebClient, **kwargs: Any) -> AsyncWebClient:
    """A client on `client`'s URL and session without slack_sdk's own retries: each try is one
    request and one log line here."""
    return AsyncWebClient(
        base_url=client.base_url, session=client.session, timeout=client.timeout, **kwargs
    )


async def sign_in(client: AsyncWebClient, state: SignIn) -> None:
    """`auth.test` with `client`'s token until Slack answers it; the answer is `state`'s, which
    authorizes Bolt's requests from then on (`SignIn.authorize`)."""
    token = client.token or ""
    client = _plain_client(client, token=token)
    result = await _keep_trying(
        client.auth_test,
        what="auth.test",
        url=client.base_url,
        refused=SignInRefused.auth,
        state=state,
    )
    state.signed_in(result, token)
    state.reason = "signed in to Slack, starting"


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
    web = _plain_client(handler.app.client)

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
        refused=SignInRefused.connections,
        state=state,
    )
    state.connected(socket_mode_check(client))
