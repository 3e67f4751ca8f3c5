"""`opsgate run --http` as a real child process, against the loopback Slack and LLM stand-ins:
for tests that stop it (SIGTERM) or kill it (SIGKILL) and start it again on the same database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import app_mention, event_body, sign

__all__ = ["SECRET", "BotProcess", "bot_process"]

ROOT = Path(__file__).resolve().parents[2]
OPSGATE = Path(sys.executable).with_name("opsgate")
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class BotProcess:
    """A started child; `lines` is its stderr so far."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stderr is not None
        while line := await self.process.stderr.readline():
            async with self._changed:
                self.lines.append(line.decode(errors="replace").rstrip())
                self._changed.notify_all()

    async def wait_for_line(self, fragment: str, timeout: float = 30) -> None:
        """Until the child wrote a stderr line containing `fragment`."""

        async def seen() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: any(fragment in ln for ln in self.lines))

        try:
            await asyncio.wait_for(seen(), timeout)
        except TimeoutError:
            tail = "\n".join(self.lines[-30:])
            raise AssertionError(
                f"no stderr line with {fragment!r} in {timeout}s:\n{tail}"
            ) from None

    async def mention(
        self, http: httpx.AsyncClient, text: str, *, ts: str, channel: str = "C0OPS"
    ) -> int:
        payload = app_mention(
            f"<@UBOT> {text}", channel=channel, user="U0ALICE", ts=ts, event_id=f"Ev{ts}"
        )
        body = event_body(payload)
        response = await http.post(
            f"{self.url}/slack/events",
            content=body,
            headers={"Content-Type": "application/json", **sign(SECRET, body)},
        )
        return response.status_code

    async def stop(self, sig: signal.Signals, timeout: float = 60) -> int:
        self.process.send_signal(sig)
        code = await asyncio.wait_for(self.process.wait(), timeout)
        await self._reader
        return code


@contextlib.asynccontextmanager
async def bot_process(
    tmp_path: Path, llm: LLMStandIn, slack: SlackAPIStandIn, **env: str
) -> AsyncIterator[BotProcess]:
    """Start `opsgate run --http` on the database in `tmp_path`; wait until it listens; kill
    it on the way out if it still runs. `env` adds to (or overrides) its environment."""
    port = _free_port()
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "OPSGATE_"))
    }
    environment.update(
        PYTHONPATH=str(ROOT),
        SLACK_BOT_TOKEN="xoxb-test-token",
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=slack.url,
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="sk-test",
        OPSGATE_MODEL="test-model",
        **{"OPSGATE_DB": str(tmp_path / "opsgate.db"), **env},
    )
    process = await asyncio.create_subprocess_exec(
        str(OPSGATE),
        "run",
        "--http",
        "--port",
        str(port),
        cwd=tmp_path,
        env=environment,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    bot = BotProcess(process, port)
    try:
        await bot.wait_for_line("OpsGate listening")
        yield bot
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await bot._reader
