"""The whole bot over real loopback HTTP: the Bolt app in HTTP mode, a Slack Web API stand-in,
an OpenAI-compatible SSE stand-in and the real SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from slack_bolt.async_app import AsyncApp

from agent_core import Tool
from bot.observability import Metrics
from bot.policy import Policy
from bot.runs.service import RunService
from bot.server import http_app, started
from bot.settings import Settings
from bot.slack.app import CountingWebClient
from bot.slack.mrkdwn import user_mention
from bot.slack.pacing import Pacer
from bot.store import utc_now
from bot.wiring import Deps, open_deps
from tests.support.llm_server import LLMStandIn, sse_bytes
from tests.support.loopback import serve_on_loopback
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import (
    app_mention,
    block_actions,
    event_body,
    interaction_body,
    message,
    sign,
    slash_command,
    view_submission,
)

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM = "T0TEST"
CHANNEL = "C0OPS"


@dataclass
class Bot:
    url: str
    llm: LLMStandIn
    slack: SlackAPIStandIn
    deps: Deps
    http: httpx.AsyncClient
    service: RunService
    """The run service the app's listeners call (expiry, recovery: what a timer or a restart
    would trigger)."""
    metrics: Metrics
    """What `/metrics` serves (also `deps.observer`)."""
    app: AsyncApp | None = None
    """The Bolt app itself (tests that enumerate its listeners)."""
    _events: int = field(default=0)

    async def post(self, body: bytes, content_type: str, **headers: str) -> httpx.Response:
        return await self.http.post(
            f"{self.url}/slack/events",
            content=body,
            headers={"Content-Type": content_type, **sign(SECRET, body), **headers},
        )

    async def event(self, payload: dict[str, Any], **headers: str) -> httpx.Response:
        return await self.post(event_body(payload), "application/json", **headers)

    async def mention(
        self,
        text: str,
        *,
        user: str = "U0ALICE",
        ts: str | None = None,
        thread_ts: str | None = None,
        channel: str = CHANNEL,
    ) -> str:
        """Mention the bot; returns the thread root ts."""
        self._events += 1
        ts = ts or f"1700000{self._events:03d}.000100"
        payload = app_mention(
            f"<@UBOT> {text}",
            channel=channel,
            user=user,
            ts=ts,
            thread_ts=thread_ts,
            event_id=f"Ev{uuid.uuid4().hex[:12].upper()}",
        )
        response = await self.event(payload)
        assert response.status_code == 200, response.text
        return thread_ts or ts

    async def message(
        self,
        text: str,
        *,
        user: str = "U0ALICE",
        bot_id: str | None = None,
        channel: str = CHANNEL,
        ts: str | None = None,
        thread_ts: str | None = None,
        without: Sequence[str] = (),
        **event_fields: Any,
    ) -> str:
        """Post a `message` event (a bot's when `bot_id` is given; `without` drops event fields,
        e.g. "user" for an incoming-webhook post); returns the thread root ts."""
        self._events += 1
        ts = ts or f"1700000{self._events:03d}.000200"
        payload = message(
            text,
            channel=channel,
            user=user,
            ts=ts,
            thread_ts=thread_ts,
            bot_id=bot_id,
            event_id=f"Ev{uuid.uuid4().hex[:12].upper()}",
            **event_fields,
        )
        for name in without:
            payload["event"].pop(name, None)
        response = await self.event(payload)
        assert response.status_code == 200, response.text
        return thread_ts or ts

    async def slash(
        self, text: str, *, user: str, channel: str = CHANNEL
    ) -> tuple[httpx.Response, str]:
        """Run `/opsgate <text>`; returns the HTTP answer (the ack) and the name of the
        command's response_url hook on the Slack stand-in (see `hook_answers`)."""
        self._events += 1
        hook = f"cmd{self._events}"
        body = slash_command(
            text, user=user, channel=channel, team=TEAM, response_url=self.slack.response_url(hook)
        )
        return await self.post(body, "application/x-www-form-urlencoded"), hook

    async def hook_answers(self, hook: str, count: int = 1) -> list[dict[str, Any]]:
        """What the app posted to a command's response_url (waits for `count` posts)."""
        calls = await self.slack.wait_for(
            "response_url", count=count, where=lambda c: c.params.get("_hook") == hook
        )
        return [c.params for c in calls]

    async def click(
        self,
        action_id: str,
        value: str,
        *,
        user: str,
        channel: str = CHANNEL,
        team: str = TEAM,
        block_id: str | None = None,
    ) -> httpx.Response:
        """Click a card's button as Slack would: the payload carries the card as it is drawn
        now and the `block_id` of the button's block (`block_id` overrides it, e.g. to click
        a copy of the card drawn earlier)."""
        row = await self.deps.store.get_call(value)
        message_ts = (row.card_ts if row else None) or "1700000000.000001"
        drawn = (
            self.slack.message(row.card_channel, message_ts) if row and row.card_channel else None
        )
        blocks = list((drawn or {}).get("blocks") or []) or None
        if block_id is None:
            block_id = _block_of(blocks or [], action_id) or "opsgate_decision"
        payload = block_actions(
            action_id,
            value,
            user=user,
            channel=channel,
            message_ts=message_ts,
            team=team,
            block_id=block_id,
            blocks=blocks,
        )
        return await self.post(interaction_body(payload), "application/x-www-form-urlencoded")

    async def submit_reject(
        self, ledger_id: str, reason: str | None, *, user: str
    ) -> httpx.Response:
        from bot.slack.ids import ACTION_REASON, BLOCK_REASON, CALLBACK_REJECT

        values = {BLOCK_REASON: {ACTION_REASON: {"type": "plain_text_input", "value": reason}}}
        payload = view_submission(CALLBACK_REJECT, ledger_id, values, user=user)
        return await self.post(interaction_body(payload), "application/x-www-form-urlencoded")

    def cards(self) -> list[dict[str, Any]]:
        """Approval cards posted so far: {ts, ledger_id, blocks, params}."""
        out = []
        for call in self.slack.calls_to("chat.postMessage"):
            if not call.ok:
                continue
            ids = _button_values(call.params.get("blocks") or [])
            if ids:
                out.append({"ledger_id": ids[0], "params": call.params})
        return out

    async def wait_cards(self, n: int, timeout: float = 10) -> list[dict[str, Any]]:
        await self.slack.wait_for(
            "chat.postMessage",
            count=n,
            where=lambda c: c.ok and bool(_button_values(c.params.get("blocks") or [])),
            timeout=timeout,
        )
        await self.settle()
        return self.cards()

    async def settle(self, timeout: float = 15, *, runs: bool = True) -> None:
        """Wait until every Bolt listener that was started has finished, and every run it
        spawned too (with `runs=False`, the listeners only: runs may still be going).
        Event-driven: waits on the tasks themselves, never on a clock."""

        async def _settle() -> None:
            while True:
                # A listener, or the processing of what it saved in the inbox.
                listeners = [
                    t
                    for t in asyncio.all_tasks()
                    if "run_ack_function_asynchronously" in repr(t.get_coro())
                    or t.get_name().startswith("inbox ")
                ]
                if listeners:
                    await asyncio.wait(listeners)
                    continue
                if runs and self.deps.tasks.running:
                    await self.deps.tasks.wait_idle()
                    continue
                # What the runs said is in the outbox until its sender sent it.
                outbox = getattr(self.service.ctx.output, "outbox", None)
                if outbox is not None and not outbox.idle:
                    await outbox.wait_idle()
                    continue
                return

        await asyncio.wait_for(_settle(), timeout)


def pacer_for(slack: SlackAPIStandIn) -> Pacer:
    """Slack's pace as the stand-in keeps it: its speed when it enforces the tiers, else so
    fast that pacing never slows a test (429s it answers are still waited out)."""
    limits = slack.rate_limits
    return Pacer(speed=limits.speed if limits is not None else 1000.0)


def paced_client(
    slack: SlackAPIStandIn, pacer: Pacer, on_error: Callable[[str], None] | None = None
) -> CountingWebClient:
    """A Web API client of the stand-in, every call through `pacer`, slack_sdk's retries off
    (the pacer waits out 429s); `on_error(method)` hears each failed call."""
    return CountingWebClient(
        on_error=on_error or (lambda method: None),
        pacer=pacer,
        token="xoxb-test-token",
        base_url=slack.url,
        retry_handlers=[],
    )


def cancel_values(blocks: Sequence[dict[str, Any]]) -> list[str]:
    """The values (ledger ids) of the "Cancel run" buttons in a card's blocks."""
    return [
        element["value"]
        for block in blocks
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if element.get("action_id") == "opsgate_cancel"
    ]


def _block_of(blocks: Sequence[dict[str, Any]], action_id: str) -> str | None:
    """The `block_id` of the actions block holding the button `action_id`."""
    for block in blocks:
        elements = block.get("elements", []) if block.get("type") == "actions" else []
        if any(e.get("action_id") == action_id for e in elements):
            return str(block.get("block_id") or "") or None
    return None


def _button_values(blocks: Sequence[dict[str, Any]]) -> list[str]:
    """The ledger ids of a pending card's decision buttons (Approve, or Reject on a card that
    may not be approved)."""
    values: list[str] = []
    for block in blocks:
        if block.get("type") == "actions":
            for element in block.get("elements", []):
                decides = element.get("action_id") in ("opsgate_approve", "opsgate_reject")
                if decides and element["value"] not in values:
                    values.append(element["value"])
    return values


def texts(slack: SlackAPIStandIn) -> list[str]:
    """Everything the bot wrote into threads (posted, edited or streamed), in order; cards'
    redraws last (the outbox sends a card's "ran" while the answer streams)."""
    out: list[str] = []
    redraws: list[str] = []
    cards = set()
    for call in slack.calls:
        params = call.params
        if call.method == "chat.postMessage" and _button_values(params.get("blocks") or []):
            cards.add(call.response.get("ts"))
        if call.method == "chat.update" and params.get("ts") in cards:
            redraws.append(str(params.get("text", "")))
        elif call.method in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
            out.append(str(params.get("text", "")))
        elif call.method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            chunks = params.get("chunks") or []
            if isinstance(chunks, str):
                chunks = json.loads(chunks)
            out.append("".join(c.get("text", "") for c in chunks if isinstance(c, dict)))
            out.append(str(params.get("markdown_text") or ""))
    return out + redraws


class HeldReplies:
    """LLM replies that each wait until the test releases them, counting how many model
    requests are in flight at once: the way to measure a concurrency limit without sleeping.

    Queue them with `queue(llm, n)`; each answers `reply(user_text)` as a streamed text.
    """

    def __init__(self, reply: Callable[[str], str] = lambda text: f"Looked into: {text}") -> None:
        self.reply = reply
        self.active = 0
        self.peak = 0
        self.arrived: list[str] = []
        """The last user message of each request, in arrival order."""
        self._gates: list[asyncio.Event] = []
        self._changed = asyncio.Condition()

    def queue(self, llm: LLMStandIn, n: int) -> None:
        for _ in range(n):
            llm.reply_with(self._handle)

    async def _handle(self, body: dict[str, Any]) -> web.StreamResponse:
        users = [m for m in body["messages"] if m["role"] == "user"]
        text = str(users[-1]["content"]) if users else ""
        gate = asyncio.Event()
        async with self._changed:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.arrived.append(text)
            self._gates.append(gate)
            self._changed.notify_all()
        try:
            await gate.wait()
        finally:
            async with self._changed:
                self.active -= 1
                self._changed.notify_all()
        return web.Response(
            body=text_sse(self.reply(text), model=str(body.get("model"))),
            headers={"Content-Type": "text/event-stream"},
        )

    async def wait_arrived(self, n: int, timeout: float = 15) -> None:
        """Until `n` requests have arrived in all."""

        async def arrived() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.arrived) >= n)

        try:
            await asyncio.wait_for(arrived(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"{len(self.arrived)} model request(s) arrived within {timeout}s, expected {n}"
            ) from None

    def release(self, n: int | None = None) -> int:
        """Let the first `n` held requests not yet released answer (all when None)."""
        waiting = [g for g in self._gates if not g.is_set()]
        for gate in waiting[:n]:
            gate.set()
        return len(waiting[:n])

    async def release_in_steps(self, total: int, limit: int, timeout: float = 15) -> None:
        """Release requests until `total` have been released in all, each time once as many
        as the limit allows have arrived: `min(limit, left)` at a time. Fails if they come one
        by one when more could run, or if fewer than `total` ever arrive."""
        while (released := sum(g.is_set() for g in self._gates)) < total:
            step = min(limit, total - released)
            await self.wait_arrived(released + step, timeout)
            self.release()


def text_sse(text: str, *, model: str = "stand-in-model") -> bytes:
    """A streamed OpenAI-style text answer: role, one content chunk, `stop`, `[DONE]`."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-held",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    return sse_bytes(
        [chunk({"role": "assistant", "content": ""}), chunk({"content": text}), chunk({}, "stop")]
    )


@contextlib.asynccontextmanager
async def running_bot(
    tmp_path: Path,
    *,
    tools: Sequence[Tool] | None = None,
    policy: Policy | None = None,
    llm: LLMStandIn | None = None,
    slack: SlackAPIStandIn | None = None,
    clock: Callable[[], datetime] | None = None,
    llm_url: str | None = None,
    settings: dict[str, Any] | None = None,
) -> AsyncIterator[Bot]:
    """Start the real app in HTTP mode on a loopback port. Pass `llm`/`slack` to keep the
    stand-ins across a simulated restart (same SQLite file, new app); `settings` overrides
    settings fields (e.g. `opsgate_run_timeout`)."""
    async with contextlib.AsyncExitStack() as stack:
        if llm is None:
            llm = await stack.enter_async_context(LLMStandIn())
        if slack is None:
            slack = await stack.enter_async_context(SlackAPIStandIn())
        overrides = settings or {}
        settings_ = Settings(
            slack_bot_token="xoxb-test-token",
            slack_signing_secret=SECRET,
            slack_api_url=slack.url,
            openai_base_url=llm_url or llm.base_url,
            openai_api_key="sk-test",
            opsgate_model="test-model",
            _env_file=None,
            **{"opsgate_db": str(tmp_path / "opsgate.db"), **overrides},
        )
        deps = await stack.enter_async_context(
            open_deps(
                settings_,
                tools=tools,
                policy=policy,
                clock=clock or utc_now,
                person=user_mention,
                observer=Metrics(),
            )
        )
        running = await stack.enter_async_context(
            started(settings_, deps, expiry_interval=3600, shutdown_grace=0, pacer=pacer_for(slack))
        )
        web_runner, base_url = await serve_on_loopback(
            http_app(
                running.app, store=deps.store, metrics=running.metrics, health=deps.write_health
            )
        )
        stack.push_async_callback(web_runner.cleanup)
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=10))
        yield Bot(base_url, llm, slack, deps, http, running.service, running.metrics, running.app)
