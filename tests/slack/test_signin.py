"""Signing in at start-up, in process: which answers stop the start and which are asked again,
against a loopback server that answers as Slack or as a proxy in front of it would."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SignInRefused
from bot.slack import signin
from bot.slack.signin import SignIn, sign_in
from tests.support.loopback import serve_on_loopback

AUTH_OK = {"ok": True, "team_id": "T0TEST", "user_id": "UBOT", "bot_id": "BBOT"}


@asynccontextmanager
async def answering(*answers: web.Response) -> AsyncIterator[str]:
    """`auth.test` answered with `answers` in turn, then Slack's ok."""
    queue = deque(answers)

    async def auth_test(request: web.Request) -> web.Response:
        return queue.popleft() if queue else web.json_response(AUTH_OK)

    app = web.Application()
    app.router.add_post("/api/auth.test", auth_test)
    runner, base = await serve_on_loopback(app, access_log=None)
    try:
        yield f"{base}/api/"
    finally:
        await runner.cleanup()


def _client(url: str) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=url)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signin, "BACKOFF_FIRST", 0.01)


async def test_a_proxy_page_and_slacks_5xx_are_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    html = web.Response(status=502, text="<html>Bad Gateway</html>", content_type="text/html")
    slack_down = web.json_response({"ok": False, "error": "internal_error"}, status=503)
    limited = web.json_response({"ok": False, "error": "fatal_error"})
    state = SignIn()
    async with answering(html, slack_down, limited) as url:
        with caplog.at_level(logging.WARNING, logger="opsgate.slack"):
            await sign_in(_client(url), state)
    tries = [r for r in caplog.records if "Slack is not reachable" in r.getMessage()]
    assert len(tries) == 3 and not any(r.exc_info for r in tries)
    assert "HTTP 502" in tries[0].getMessage() and "HTTP 503" in tries[1].getMessage()
    assert await state.check() is not None  # signed in, not yet connected: the caller says so
    state.done()
    assert await state.check() is None


@pytest.mark.parametrize("error", ["invalid_auth", "token_revoked", "account_inactive"])
async def test_a_refusal_stops_at_once(error: str) -> None:
    async with answering(web.json_response({"ok": False, "error": error})) as url:
        with pytest.raises(SignInRefused) as refused:
            await sign_in(_client(url), SignIn())
    assert str(refused.value) == str(SignInRefused.auth(error))


async def test_not_authed_as_http_401_is_a_refusal() -> None:
    answer = web.json_response({"ok": False, "error": "not_authed"}, status=401)
    async with answering(answer) as url:
        with pytest.raises(SignInRefused, match="'not_authed'"):
            await sign_in(_client(url), SignIn())


async def test_bolt_is_authorized_by_the_sign_ins_answer() -> None:
    """The app is given `SignIn.authorize` at construction: no request is authorized before
    the sign-in, and after it each is, from its one `auth.test`, with the bot token."""
    state = SignIn()
    assert await state.authorize("U1") is None
    async with answering() as url:
        await sign_in(_client(url), state)
    result = await state.authorize("U1")
    assert result is not None
    assert (result.team_id, result.bot_id, result.bot_user_id) == ("T0TEST", "BBOT", "UBOT")
    assert (result.bot_token, result.user_id) == ("xoxb-test", "U1")


async def test_in_socket_mode_slack_is_ready_while_the_connection_is_up() -> None:
    """`/readyz`'s one Slack check, built before the start: the sign-in's reason, then the
    Socket Mode connection's state."""
    up = [True]

    async def connection() -> str | None:
        return None if up[0] else "the Socket Mode connection to Slack is down"

    state = SignIn()
    assert await state.check() == "signing in to Slack"
    state.connected(connection)
    assert await state.check() is None
    up[0] = False
    assert await state.check() == "the Socket Mode connection to Slack is down"
