"""Several real `opsgate run --http` processes sharing one PostgreSQL database, for the replica
tests: the LLM and Slack stand-ins run in the test's process on loopback, and every request to
a replica is signed as Slack signs it.

`ReplicaSet` starts, stops (SIGTERM), kills (SIGKILL) and restarts them; `scripted_llm`
answers by the content of each request, so it does not matter which replica asks first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from tests.support.harness import CHANNEL, SECRET, TEAM, text_sse
from tests.support.llm_server import LLMStandIn, sse_bytes
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import (
    app_mention,
    block_actions,
    event_body,
    interaction_body,
    sign,
)

__all__ = ["Replica", "ReplicaSet", "card_of", "scripted_llm", "thread_texts"]

ROOT = Path(__file__).resolve().parents[2]
OPSGATE = Path(sys.executable).with_name("opsgate")
START_TIMEOUT = 60.0

POLICY = """\
[defaults]
tools_modules = ["tests.support.replica_tools:deploy", "tests.support.replica_tools:hang"]
ttl = "1h"
concurrency = 2
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Replica:
    """One `opsgate run --http` process; its stderr is kept (and shown if a test fails)."""

    def __init__(self, index: int, env: dict[str, str], cwd: Path) -> None:
        self.index = index
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log: list[str] = []
        self._env = env
        self._cwd = cwd
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> None:
        self._listening = asyncio.Event()
        self._proc = await asyncio.create_subprocess_exec(
            str(OPSGATE),
            "run",
            "--http",
            "--port",
            str(self.port),
            env=self._env,
            cwd=self._cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read(self._proc))

    async def wait_listening(self) -> None:
        waiting = asyncio.create_task(self._listening.wait())
        assert self._reader is not None
        await asyncio.wait(
            {waiting, self._reader}, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        waiting.cancel()
        if not self._listening.is_set():
            raise AssertionError(f"replica {self.index} did not start:\n" + "\n".join(self.log))

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.log.append(f"[{self.index}:{proc.pid}] {line}")
            if "OpsGate listening on" in line:
                self._listening.set()

    async def stop(self, timeout: float = 60) -> int:
        """SIGTERM, and wait for the process to end (its in-flight work first)."""
        return await self._end(signal.SIGTERM, timeout)

    async def kill(self) -> None:
        """SIGKILL: the process dies on the spot, whatever it was doing."""
        await self._end(signal.SIGKILL, 30)

    async def _end(self, sig: signal.Signals, timeout: float) -> int:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return proc.returncode if proc is not None and proc.returncode is not None else 0
        proc.send_signal(sig)
        code = await asyncio.wait_for(proc.wait(), timeout)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, timeout)
        return code


class ReplicaSet:
    """The stand-ins, a policy file and `count` replicas on the database at `db_url`."""

    def __init__(
        self,
        db_url: str,
        workdir: Path,
        llm: LLMStandIn,
        slack: SlackAPIStandIn,
        http: httpx.AsyncClient,
        *,
        count: int = 3,
        lease: float = 2.0,
        heartbeat: float = 0.4,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        """`extra_env`: settings of every replica beyond the stand-ins' and the leases'."""
        policy = workdir / "opsgate.toml"
        policy.write_text(POLICY)
        self.workdir = workdir
        self.llm = llm
        self.slack = slack
        self.http = http
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLACK_", "OPENAI_", "OPSGATE_"))
        }
        env.update(
            PYTHONPATH=str(ROOT),
            SLACK_BOT_TOKEN="xoxb-test-token",
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=slack.url,
            OPENAI_BASE_URL=llm.base_url,
            OPENAI_API_KEY="sk-test",
            OPSGATE_MODEL="test-model",
            OPSGATE_DB=db_url,
            OPSGATE_POLICY=str(policy),
            OPSGATE_LEASE_SECONDS=str(lease),
            OPSGATE_HEARTBEAT_SECONDS=str(heartbeat),
            REPLICA_TEST_DIR=str(workdir),
            REPLICA_TEST_HOOK=slack.response_url("tool-ran"),
        )
        env.update(extra_env or {})
        self.replicas = [Replica(i, env, workdir) for i in range(count)]
        self._events = 0

    def __getitem__(self, index: int) -> Replica:
        return self.replicas[index]

    async def start(self) -> None:
        for replica in self.replicas:
            await replica.start()
        await asyncio.gather(*(r.wait_listening() for r in self.replicas))

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.replicas if r.alive))

    def log(self) -> str:
        return "\n".join(line for r in self.replicas for line in r.log)

    def ran(self) -> list[tuple[int, str]]:
        """(process id, what) for each tool run, from the tools' own log."""
        log = self.workdir / "ran.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [(int(pid), what) for pid, what in (line.split(" ", 1) for line in lines)]

    def by_pid(self, pid: int) -> Replica:
        return next(r for r in self.replicas if r.pid == pid)

    # -- what Slack would send -------------------------------------------------------------

    async def post(self, replica: Replica, body: bytes, content_type: str) -> httpx.Response:
        headers = {"Content-Type": content_type, **sign(SECRET, body)}
        return await self.http.post(f"{replica.url}/slack/events", content=body, headers=headers)

    def mention_body(
        self, text: str, *, channel: str = CHANNEL, user: str = "U0ALICE"
    ) -> tuple[bytes, str]:
        """A signed-to-be `app_mention` event and its message's ts (the thread)."""
        self._events += 1
        ts = f"1700{self._events:06d}.000100"
        payload = app_mention(
            f"<@UBOT> {text}",
            channel=channel,
            user=user,
            ts=ts,
            event_id=f"Ev{uuid.uuid4().hex[:12].upper()}",
        )
        return event_body(payload), ts

    async def mention(self, replica: Replica, text: str, *, channel: str = CHANNEL) -> str:
        """Mention the bot through `replica`; returns the thread's ts."""
        body, ts = self.mention_body(text, channel=channel)
        response = await self.post(replica, body, "application/json")
        assert response.status_code == 200, response.text
        return ts

    async def wait_ran(self, what: str, timeout: float = 30) -> int:
        """Until a tool run `what` (e.g. "hang x") started; returns the process that runs it."""
        calls = await self.slack.wait_for(
            "response_url",
            where=lambda c: (
                c.params.get("_hook") == "tool-ran"
                and str(c.params.get("text", "")).endswith(f" {what}")
            ),
            timeout=timeout,
        )
        return int(str(calls[0].params["text"]).split(" ", 1)[0])

    async def click(
        self, replica: Replica, card: dict[str, str], *, user: str, action: str = "opsgate_approve"
    ) -> httpx.Response:
        payload = block_actions(
            action,
            card["ledger_id"],
            user=user,
            channel=card["channel"],
            message_ts=card["ts"],
            team=TEAM,
            response_url=self.slack.response_url(f"click-{user}"),
        )
        body = interaction_body(payload)
        return await self.post(replica, body, "application/x-www-form-urlencoded")

    async def wait_card(self, thread_ts: str, timeout: float = 30) -> dict[str, str]:
        """The approval card posted in the thread (once it is there)."""
        calls = await self.slack.wait_for(
            "chat.postMessage",
            where=lambda c: (
                c.ok
                and c.params.get("thread_ts") == thread_ts
                and card_of(c.params, c.response) is not None
            ),
            timeout=timeout,
        )
        card = card_of(calls[0].params, calls[0].response)
        assert card is not None
        return card

    async def wait_text(
        self, thread_ts: str, needle: str, *, count: int = 1, timeout: float = 30
    ) -> list[str]:
        """Until `count` messages of the thread contain `needle`; returns them all."""

        def found() -> bool:
            return len([t for t in thread_texts(self.slack, thread_ts) if needle in t]) >= count

        try:
            await self.slack.wait_until(found, timeout=timeout)
        except TimeoutError:
            texts = thread_texts(self.slack, thread_ts)
            raise AssertionError(
                f"no {needle!r} in thread {thread_ts} within {timeout}s: {texts}\n{self.log()}"
            ) from None
        return [t for t in thread_texts(self.slack, thread_ts) if needle in t]


def card_of(params: dict[str, Any], body: dict[str, Any]) -> dict[str, str] | None:
    """{ledger_id, channel, ts} of an approval card post, or None for any other message."""
    blocks = params.get("blocks") or []
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    for block in blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == "opsgate_approve":
                return {
                    "ledger_id": element["value"],
                    "channel": str(body.get("channel")),
                    "ts": str(body.get("ts")),
                }
    return None


def thread_texts(slack: SlackAPIStandIn, thread_ts: str) -> list[str]:
    """The current text of every message the bot has in the thread (streamed ones included)."""
    return [str(m.get("text", "")) for m in slack.messages if m.get("thread_ts") == thread_ts]


def _tool_call_sse(call_id: str, name: str, arguments: dict[str, Any]) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-replica",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "test-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return sse_bytes(
        [
            chunk({"role": "assistant", "content": None}),
            chunk({"tool_calls": [call]}),
            chunk({}, "tool_calls"),
        ]
    )


async def _answer(body: dict[str, Any]) -> web.StreamResponse:
    """`deploy X` / `hang X` ask for that tool; a tool result is reported as `DONE <result>`;
    anything else is answered `ANSWER <the user's text>`."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        payload = text_sse(f"DONE {last['content']}")
    else:
        text = str(last.get("content") or "").strip()
        verb, _, arg = text.partition(" ")
        if verb in ("deploy", "hang"):
            key = "service" if verb == "deploy" else "name"
            payload = _tool_call_sse(f"call_{verb}_{arg}", verb, {key: arg})
        else:
            payload = text_sse(f"ANSWER {text}")
    return web.Response(body=payload, headers={"Content-Type": "text/event-stream"})


@contextlib.asynccontextmanager
async def scripted_llm(replies: int = 400) -> AsyncIterator[LLMStandIn]:
    """The LLM stand-in, with `replies` answers by content queued (see `_answer`)."""
    async with LLMStandIn() as llm:
        for _ in range(replies):
            llm.reply_with(_answer)
        yield llm
