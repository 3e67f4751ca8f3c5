"""`opsgate run` signing in to Slack, as a real process: a token Slack refuses stops it with
exit status 2 and `opsgate check`'s line; a Slack it cannot reach is asked again with backoff,
one line a try and no traceback, `/readyz` not ready meanwhile, and SIGTERM or Ctrl-C (SIGINT)
stops it within `OPSGATE_SHUTDOWN_GRACE`, in Socket Mode and in HTTP mode."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bot.errors import SignInRefused
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.socket_mode import SocketModeStandIn

OPSGATE = Path(sys.executable).with_name("opsgate")
ROOT = Path(__file__).resolve().parents[2]
GRACE = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Bot:
    """The child; `lines` its stderr so far, read as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            async with self._changed:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()

    async def wait_lines(self, needle: str, count: int = 1, timeout: float = 30) -> None:
        def seen() -> bool:
            return sum(needle in line for line in self.lines) >= count

        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(seen)
        except TimeoutError:
            text = "\n".join(self.lines)
            raise AssertionError(f"not {count} lines with {needle!r}:\n{text}") from None

    async def exit_code(self, timeout: float = 30) -> int:
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await self.reader
        return code


@contextlib.asynccontextmanager
async def opsgate_run(
    tmp_path: Path, llm: LLMStandIn, slack_url: str, *, http: bool = False, **env: str
) -> AsyncIterator[_Bot]:
    port = _free_port()
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_APP_TOKEN": "xapp-1-A0TEST-secret",
        "SLACK_SIGNING_SECRET": "signing-secret-for-tests",
        "SLACK_API_URL": slack_url,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "sk-test",
        "OPSGATE_MODEL": "test-model",
        "OPSGATE_DB": str(tmp_path / "opsgate.db"),
        "OPSGATE_PORT": str(port),
        "OPSGATE_SHUTDOWN_GRACE": str(GRACE),
        **env,
    }
    proc = await asyncio.create_subprocess_exec(
        str(OPSGATE),
        "run",
        *(["--http"] if http else []),
        cwd=tmp_path,
        env=environment,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    bot = _Bot(proc, port)
    try:
        yield bot
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await bot.reader


async def test_a_revoked_bot_token_stops_the_start_with_checks_line(tmp_path: Path) -> None:
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn(token="xoxb-the-right-one") as slack,
        opsgate_run(tmp_path, llm, slack.url) as bot,
    ):
        assert await bot.exit_code() == 2, "\n".join(bot.lines)
    line = str(SignInRefused.auth("invalid_auth"))
    assert line == "slack: auth.test said 'invalid_auth'; check SLACK_BOT_TOKEN"
    assert f"opsgate: {line}" in bot.lines
    assert not any("Traceback" in text for text in bot.lines)


@pytest.mark.parametrize("error", ["token_revoked", "account_inactive"])
async def test_each_refusal_of_auth_test_stops_the_start(tmp_path: Path, error: str) -> None:
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        slack.respond_with("auth.test", {"ok": False, "error": error})
        async with opsgate_run(tmp_path, llm, slack.url, http=True) as bot:
            assert await bot.exit_code() == 2, "\n".join(bot.lines)
    assert f"opsgate: {SignInRefused.auth(error)}" in bot.lines


async def test_a_refused_app_token_stops_the_start(tmp_path: Path) -> None:
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        slack.respond_with("apps.connections.open", {"ok": False, "error": "invalid_auth"})
        async with opsgate_run(tmp_path, llm, slack.url) as bot:
            assert await bot.exit_code() == 2, "\n".join(bot.lines)
    assert f"opsgate: {SignInRefused.connections('invalid_auth')}" in bot.lines


@pytest.mark.parametrize(
    ("http", "sig"),
    [(False, signal.SIGTERM), (False, signal.SIGINT), (True, signal.SIGTERM)],
    ids=["socket-sigterm", "socket-sigint", "http-sigterm"],
)
async def test_an_unreachable_slack_is_retried_until_stopped(
    tmp_path: Path, http: bool, sig: signal.Signals
) -> None:
    closed = f"http://127.0.0.1:{_free_port()}/api/"  # nothing listens there
    async with LLMStandIn() as llm, opsgate_run(tmp_path, llm, closed, http=http) as bot:
        await bot.wait_lines("Slack is not reachable", count=2)
        async with httpx.AsyncClient(timeout=10) as client:
            ready = await client.get(f"{bot.url}/readyz")
            assert ready.status_code == 503
            assert any("not signed in to Slack" in r for r in ready.json()["reasons"])
            if http:  # Slack's deliveries are asked again later, not taken half-started
                assert (await client.post(f"{bot.url}/slack/events")).status_code == 503
        asked = time.monotonic()
        bot.proc.send_signal(sig)
        code = await bot.exit_code(timeout=GRACE)
        assert time.monotonic() - asked < GRACE
    assert code == 0, "\n".join(bot.lines)
    tries = [line for line in bot.lines if "Slack is not reachable" in line]
    assert "try 1); trying again in 1 s" in tries[0] and "try 2); trying again in 2 s" in tries[1]
    assert not any("Traceback" in line for line in bot.lines), "\n".join(bot.lines)
    assert not any("OpsGate connected" in line for line in bot.lines)


async def test_slack_answering_again_lets_the_start_go_on(tmp_path: Path) -> None:
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack, SocketModeStandIn(slack) as sock:
        slack.fail_next("auth.test", status=503, times=2)
        slack.fail_next("apps.connections.open", status=502)
        async with opsgate_run(tmp_path, llm, slack.url) as bot:
            await bot.wait_lines("OpsGate connected to Slack (Socket Mode)")
            await sock.wait_connected()
            async with httpx.AsyncClient(timeout=10) as client:
                ready = await client.get(f"{bot.url}/readyz")
                assert (ready.status_code, ready.json()) == (200, {"ready": True})
            bot.proc.send_signal(signal.SIGTERM)
            assert await bot.exit_code() == 0, "\n".join(bot.lines)
    tries = [line for line in bot.lines if "Slack is not reachable" in line]
    assert len(tries) == 3 and "auth.test: HTTP 503" in tries[0], tries
    assert "apps.connections.open: HTTP 502" in tries[2] and "try 1)" in tries[2]
