"""Serving the app: HTTP mode (`POST /slack/events`, `GET /healthz`) or Socket Mode.

This is where the parts meet: `bot.wiring` opens the store, the agent and the connection pools,
`bot.slack` builds the Web API client and the Slack `ThreadOutput`, the run service is built on
both, and the Bolt app's listeners call it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp

from .runs.service import RunService
from .settings import Settings
from .slack import SlackThreadOutput, create_app, group_members, slack_client
from .slack._text import user_mention
from .tools import protect_process_environment
from .wiring import Deps, open_deps, run_service

__all__ = ["Started", "http_app", "serve", "started"]

logger = logging.getLogger("opsgate")

EXPIRY_INTERVAL = 15.0
SHUTDOWN_GRACE = 30.0


def http_app(app: AsyncApp) -> web.Application:
    """Slack's events and interactivity on one endpoint, plus a health check."""

    async def slack_events(request: web.Request) -> web.StreamResponse:
        response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    async def healthz(request: web.Request) -> web.StreamResponse:
        return web.json_response({"ok": True})

    web_app = web.Application()
    web_app.add_routes([web.post("/slack/events", slack_events), web.get("/healthz", healthz)])
    return web_app


async def _expiry_loop(service: RunService, interval: float) -> None:
    while True:
        try:
            await service.expire_due()
        except Exception:
            logger.exception("expiring approvals failed")
        await asyncio.sleep(interval)


@dataclass(frozen=True)
class Started:
    """The app, and the run service its listeners call."""

    app: AsyncApp
    service: RunService


@contextlib.asynccontextmanager
async def started(
    settings: Settings,
    deps: Deps,
    *,
    expiry_interval: float = EXPIRY_INTERVAL,
    shutdown_grace: float = SHUTDOWN_GRACE,
) -> AsyncIterator[Started]:
    """The app with its start-up work done: interrupted runs recovered, expiry running."""
    output = SlackThreadOutput(slack_client(settings, deps.slack_http))
    service = run_service(deps, output, members=group_members(output.client))
    app = create_app(settings, service, output, policy=deps.policy)
    await service.recover()
    deps.tasks.spawn(_expiry_loop(service, expiry_interval), name="expiry", service=True)
    try:
        yield Started(app, service)
    finally:
        await deps.tasks.aclose(grace=shutdown_grace)


def _stop_on_signals() -> asyncio.Event:
    """Set on SIGINT or SIGTERM. Installed first thing, so a stop during start-up is a graceful
    one too (it takes effect once the bot is up)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def serve(settings: Settings, *, http: bool, port: int) -> None:
    """Run the bot until SIGINT or SIGTERM.

    First of all the process is made non-dumpable, so that `run_command`'s children (same user)
    cannot read the tokens from `/proc/<pid>/environ`; run the bot as a dedicated non-root user
    for that to hold (root reads any process).
    """
    protect_process_environment()
    stop = _stop_on_signals()
    async with (
        open_deps(settings, person=user_mention) as deps,
        started(settings, deps, shutdown_grace=settings.opsgate_shutdown_grace) as bot,
    ):
        app = bot.app
        if http:
            runner = web.AppRunner(http_app(app))
            await runner.setup()
            # A burst of Slack deliveries must not overflow the default backlog of 128.
            site = web.TCPSite(runner, "0.0.0.0", port, backlog=1024)
            await site.start()
            logger.info("OpsGate listening on :%d (POST /slack/events, GET /healthz)", port)
            try:
                await stop.wait()
            finally:
                await runner.cleanup()
        else:
            assert settings.slack_app_token is not None
            handler = AsyncSocketModeHandler(app, settings.slack_app_token.get_secret_value())
            await handler.connect_async()  # type: ignore[no-untyped-call]
            logger.info("OpsGate connected to Slack (Socket Mode)")
            try:
                await stop.wait()
            finally:
                await handler.close_async()  # type: ignore[no-untyped-call]
