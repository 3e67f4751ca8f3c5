"""Starting the local workspace: one process serving the page, the Slack Web API, the demo model
(below) and the bot's own `/slack/events` on one port, with the bot built exactly as `opsgate run
--http` builds it (`bot.server.started`), only pointed at itself.

The bot gets a generated bot token and signing secret, `SLACK_API_URL` on this server and, with
no `OPSGATE_MODEL`, the demo model on it too. The port listens before the bot is built (start-up
asks the model server about its context window); `/slack/events` answers 503 until the bot is
ready, and the one line with the page's address is printed then.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import aiohttp
from aiohttp import web
from pydantic import SecretStr
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp

from ..observability import HealthServerError, Metrics
from ..policy import Policy
from ..server import started
from ..settings import Settings
from ..slack.mrkdwn import user_mention
from ..tools import protect_process_environment
from ..wiring import open_deps
from .events import EventSender
from .page import Page
from .state import WorkspaceState, state_path, workspace_policy
from .web_api import WebAPI

__all__ = [
    "DEMO_MODEL",
    "DEMO_NOTE",
    "LOOPBACK",
    "DemoModel",
    "demo_reply",
    "local_settings",
    "serve_workspace",
]

logger = logging.getLogger("opsgate.workspace")

LOOPBACK = "127.0.0.1"
SHUTDOWN_GRACE = 10.0


def local_settings(settings: Settings, base_url: str, *, secret: str) -> Settings:
    """`settings` pointed at the workspace at `base_url`: its token, secret and Web API, and the
    demo model when no model is configured."""
    update: dict[str, object] = {
        "slack_bot_token": SecretStr(f"xoxb-local-{secrets.token_hex(12)}"),
        "slack_app_token": None,
        "slack_signing_secret": SecretStr(secret),
        "slack_api_url": f"{base_url}/api/",
    }
    if not settings.opsgate_model:
        update |= {
            "openai_base_url": f"{base_url}{DemoModel.PREFIX}",
            "openai_api_key": SecretStr(""),
            "opsgate_model": DEMO_MODEL,
        }
    return settings.model_copy(update=update)


class _Events:
    """`POST /slack/events`, handed to the Bolt app once it is built."""

    def __init__(self) -> None:
        self.app: AsyncApp | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.app is None:
            return web.json_response({"error": "starting"}, status=503)
        response = await self.app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)


def _loopback_only(port: int) -> Any:
    """Refuse requests that name another host than this one (a DNS name rebound to 127.0.0.1
    by someone else's page): on the loopback address, the page is this machine's alone."""
    allowed = {f"{LOOPBACK}:{port}", f"localhost:{port}"}

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.host not in allowed:
            raise web.HTTPMisdirectedRequest(text=f"open http://{LOOPBACK}:{port}/")
        response: web.StreamResponse = await handler(request)
        return response

    return check


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def serve_workspace(
    settings: Settings,
    *,
    explain: Callable[[Policy, str], str],
    host: str = LOOPBACK,
    port: int,
    out: TextIO = sys.stdout,
) -> None:
    """Serve the local workspace on `host`:`port` until SIGINT or SIGTERM; its page explains a
    command with `explain` (`policy explain`'s text, from the command line's side)."""
    protect_process_environment()
    stop = _stop_on_signals()
    base_url = f"http://{LOOPBACK}:{port}"
    secret = secrets.token_hex(32)
    local = local_settings(settings, base_url, secret=secret)
    policy, policy_text = workspace_policy(settings.opsgate_policy)
    db = settings.opsgate_db
    state = WorkspaceState(state_path(db if isinstance(db, Path) else None))
    events = _Events()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        sender = EventSender(f"{base_url}/slack/events", secret, session)
        note = DEMO_NOTE if local.opsgate_model == DEMO_MODEL else None
        page = Page(
            state,
            sender,
            base_url=base_url,
            policy=policy,
            policy_text=policy_text,
            model_note=note,
            explain=explain,
        )
        web_app = web.Application(middlewares=[_loopback_only(port)] if host == LOOPBACK else [])
        web_app.add_routes(
            [
                web.post("/slack/events", events.handle),
                *WebAPI(
                    state, token=local.slack_bot_token.get_secret_value(), base_url=base_url
                ).routes(),
                *DemoModel().routes(),
                *page.routes(),
            ]
        )
        runner = web.AppRunner(web_app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            await runner.cleanup()
            raise HealthServerError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        try:
            await _run_bot(local, policy, events, stop, host=host, port=port, out=out)
        finally:
            state.release()
            await runner.cleanup()
            state.close()


async def _run_bot(
    local: Settings,
    policy: Policy,
    events: _Events,
    stop: asyncio.Event,
    *,
    host: str,
    port: int,
    out: TextIO,
) -> None:
    metrics = Metrics()
    async with (
        open_deps(local, policy=policy, person=user_mention, observer=metrics) as deps,
        started(local, deps, shutdown_grace=SHUTDOWN_GRACE) as bot,
    ):
        events.app = bot.app
        where = (
            "this machine only (--host to change)"
            if host == LOOPBACK
            else f"{host}: anyone who can reach it can use the workspace"
        )
        print(
            f"OpsGate local workspace: http://{LOOPBACK}:{port}/ (listening on {where}; "
            "set SLACK_BOT_TOKEN and SLACK_APP_TOKEN to connect a real Slack workspace)",
            file=out,
            flush=True,
        )
        try:
            await stop.wait()
        finally:
            events.app = None  # the listeners still at work finish as `started` ends


# -- the demo model ------------------------------------------------------------------------------
# An OpenAI-compatible streaming endpoint served by the workspace itself, so the agent loop
# (tool calls, approvals, resumes) is the real one without a model to configure. It is not a
# language model: it runs what the last message says after run: (one run_command call), reports
# what the tool answered, and otherwise explains the flow. Every answer says it comes from the
# demo model.

DEMO_MODEL = "opsgate-demo"
DEMO_NOTE = "demo model: it runs what you write after `run:`, and explains the flow otherwise"
"""Said on the page and first in every answer."""

_RUN = re.compile(r"\brun:\s*(.+)", re.IGNORECASE | re.DOTALL)
_OUTPUT_SHOWN = 1500

EXPLAIN = """\
Try `run: df -h` (a free read: it runs at once), `run: systemctl restart nginx` (a card: \
an approver decides), or `run: rm -rf /tmp/cache` (two approvers, with a preview of what it \
would remove). `run: rm -rf /` is forbidden by the policy and never runs. Switch people at the \
top left to approve as someone else: the requester cannot approve their own call."""


AFTER = """\
That is the whole flow: the model asked for a tool call, the policy decided whether a person \
had to approve it, and the decision is in the audit log (`opsgate audit`). Write `run:` and \
another command to go on."""


def _text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content or "")


def demo_reply(messages: list[Mapping[str, Any]], tools: list[str]) -> tuple[str, str | None]:
    """(text, command): what the demo model answers to `messages`; `command` is the
    `run_command` call it makes (None: it answers in words only)."""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        result = _text_of(last).strip()
        if len(result) > _OUTPUT_SHOWN:
            result = result[:_OUTPUT_SHOWN] + "\n…"
        said = f"The tool answered:\n```\n{result or '(nothing)'}\n```\n{AFTER}"
        return f"_{DEMO_NOTE}_\n\n{said}", None
    asked = _text_of(last) if last.get("role") == "user" else ""
    found = _RUN.search(asked)
    command = found.group(1).strip().splitlines()[0].strip("` ") if found else ""
    if command and "run_command" in tools:
        return f"_{DEMO_NOTE}_\n\nRunning `{command}`.", command
    return f"_{DEMO_NOTE}_\n\n{EXPLAIN}", None


def _pieces(text: str) -> Iterator[str]:
    """The answer in pieces of a few words, so that it grows on the page as a model's does."""
    words = re.findall(r"\S+\s*|\s+", text)
    for start in range(0, len(words), 3):
        yield "".join(words[start : start + 3])


class DemoModel:
    """`GET /demo/v1/models` and `POST /demo/v1/chat/completions` (streaming)."""

    PREFIX = "/demo/v1"

    def __init__(self, *, pace: float = 0.06) -> None:
        self.pace = pace
        """Seconds between pieces of an answer."""

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(f"{self.PREFIX}/models", self._models),
            web.post(f"{self.PREFIX}/chat/completions", self._completions),
        ]

    async def _models(self, request: web.Request) -> web.Response:
        entry = {
            "id": DEMO_MODEL,
            "object": "model",
            "owned_by": "opsgate",
            "context_length": 32768,
        }
        return web.json_response({"object": "list", "data": [entry]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tools = [
            str((t.get("function") or {}).get("name"))
            for t in body.get("tools") or []
            if isinstance(t, Mapping)
        ]
        text, command = demo_reply(list(body.get("messages") or []), tools)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        chunk_id = f"chatcmpl-{secrets.token_hex(6)}"

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": DEMO_MODEL,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        await send({"role": "assistant", "content": ""})
        for piece in _pieces(text):
            await send({"content": piece})
            await asyncio.sleep(self.pace)  # the pace of the demo's "typing", not a wait
        if command is not None:
            call = {
                "index": 0,
                "id": f"call_{secrets.token_hex(6)}",
                "type": "function",
                "function": {"name": "run_command", "arguments": json.dumps({"command": command})},
            }
            await send({"tool_calls": [call]})
        await send({}, "tool_calls" if command is not None else "stop")
        usage = {"prompt_tokens": 100, "completion_tokens": len(text) // 4, "total_tokens": 0}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        final: dict[str, Any] = {"id": chunk_id, "object": "chat.completion.chunk"}
        final["model"] = DEMO_MODEL
        final |= {"created": int(time.time()), "choices": [], "usage": usage}
        await response.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response
