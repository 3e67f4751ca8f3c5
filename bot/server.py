"""Serving the app: HTTP mode (`POST /slack/events`) or Socket Mode; `/healthz`, `/readyz` and
`/metrics` on `OPSGATE_PORT` in both.

`bot.wiring` builds the bot (`open_deps`, then `slack_bot`); this module starts it (signed in,
recovered, its background work begun), serves it, and orders its shutdown: Slack's requests
stop first, then the listeners still running finish (or are cancelled), then the runs (the
task supervisor), then the outbox's sender after a short drain, and last the store and pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp

from .observability import HealthServerError, Metrics
from .observability.health import ReadinessCheck, add_operations_routes, mcp_quarantine_note
from .observability.tracing import configure_tracing
from .pagerduty import start_pagerduty
from .plane.http import PlaneRoutes, plane_desk
from .runs.replicas import start_replica_duties
from .runs.service import RunService
from .settings import Settings
from .slack import ListenerTasks, user_by_email
from .slack.listeners.cards import post_reviews
from .slack.mrkdwn import user_mention
from .slack.outbox import SlackOutbox
from .slack.pacing import Pacer
from .slack.signin import SignIn, connect_socket_mode, sign_in, socket_mode_handler
from .store import Store, WriteHealth, require_writable
from .tools import protect_process_environment
from .wiring import Deps, SlackBot, open_deps, slack_bot

__all__ = ["Started", "http_app", "serve", "started"]

logger = logging.getLogger("opsgate")

EXPIRY_INTERVAL = 15.0
"""The longest the expiry timer sleeps: it wakes for the earliest deadline before that, and
this bounds how late it sees a card another replica posted."""
SHUTDOWN_GRACE = 30.0


def http_app(
    app: AsyncApp,
    *,
    store: Store | None = None,
    metrics: Metrics | None = None,
    health: WriteHealth | None = None,
    checks: Mapping[str, ReadinessCheck] | None = None,
) -> web.Application:
    """Slack's events and interactivity on one endpoint, beside `/healthz`, `/readyz` and
    `/metrics` (given the store they check and the metrics they serve)."""

    web_app = web.Application()
    web_app.add_routes([web.post("/slack/events", SlackEvents(app).handle)])
    if store is not None:
        add_operations_routes(web_app, store, metrics or Metrics(), health, checks=checks)
    return web_app


class SlackEvents:
    """`POST /slack/events`: Bolt's while an app is `serving`; 503 before (a starting bot) and
    after (a stopping one), so that Slack delivers the request again later. The route exists
    from the moment the port listens, before the bot is built."""

    def __init__(self, app: AsyncApp | None = None) -> None:
        self._app = app

    @contextlib.contextmanager
    def serving(self, app: AsyncApp) -> Iterator[None]:
        """Slack's requests go to `app` inside the block."""
        self._app = app
        try:
            yield
        finally:
            self._app = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self._app is None:
            return web.json_response({"error": "starting or stopping"}, status=503)
        response = await self._app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)


@dataclass(frozen=True)
class Started:
    """The app, and the run service its listeners call."""

    app: AsyncApp
    service: RunService
    metrics: Metrics
    listeners: ListenerTasks
    """The tasks Bolt's listeners run in: awaited (then cancelled) when serving stops."""
    checks: Mapping[str, ReadinessCheck] = field(default_factory=dict)
    """`/readyz`'s checks, built with the bot (`bot.wiring.slack_bot`)."""
    outbox: SlackOutbox | None = None
    """The Slack outbox (`/readyz` says when it is stuck)."""


@contextlib.asynccontextmanager
async def started(
    settings: Settings,
    deps: Deps,
    *,
    expiry_interval: float = EXPIRY_INTERVAL,
    shutdown_grace: float = SHUTDOWN_GRACE,
    pacer: Pacer | None = None,
    bot: SlackBot | None = None,
) -> AsyncIterator[Started]:
    """The app with its start-up work done: signed in to Slack (`bot.slack.signin`: a refused
    token raises `SignInRefused`, an unreachable Slack is asked again), interrupted runs
    recovered, expiry running.

    `bot`: the Slack front end as `serve` built it before its port opened; else built here on
    `deps`. The metrics are `deps.observer` when that is a `Metrics` (as `serve` opens it),
    else new."""
    await require_writable(deps.store)  # a read-only or full database: refuse to start
    metrics = deps.observer if isinstance(deps.observer, Metrics) else Metrics()
    metrics.add_tools(deps.tools)
    if bot is None:
        bot = slack_bot(
            settings, deps, metrics=metrics, expiry_interval=expiry_interval, pacer=pacer
        )
    service, outbox = bot.service, bot.outbox
    await post_reviews(deps.store, deps.policy)  # changed MCP tools' review cards, once each
    await sign_in(bot.client, bot.signing_in)  # before the first request, once, not per request
    await service.recover()
    if deps.paging is not None:
        schedules = deps.policy.pagerduty_schedules
        await start_pagerduty(deps.paging, schedules, user_by_email(bot.client), deps.tasks)
    deps.tasks.spawn(bot.timer.run(service.expire_due), name="expiry", service=True)
    start_replica_duties(deps.tasks, service, interval=settings.opsgate_heartbeat_seconds)
    if bot.exporter is not None:
        deps.tasks.spawn(bot.exporter.run(), name="audit export", service=True)
    # The outbox's sender is owned here: it outlives the runs (their last words are in it) and
    # is stopped, after a short drain, once they have stopped; what is left is sent next start.
    sender = asyncio.create_task(outbox.run(), name="outbox sender")
    try:
        yield Started(bot.app, service, metrics, bot.listeners, bot.checks, outbox)
    finally:
        try:
            # Slack's requests have stopped coming (the caller's serving ended): the listeners
            # still at work finish first, then the runs they started.
            await bot.listeners.aclose(shutdown_grace)
            await deps.tasks.aclose(grace=shutdown_grace, stuck=deps.store.abort)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(OUTBOX_DRAIN):
                    await outbox.wait_idle()
        finally:
            sender.cancel()
            await _stopped(sender, deps.store)


async def _stopped(task: asyncio.Task[None], store: Store) -> None:
    """Wait for a cancelled task; if a query it was in cannot be cancelled because the database
    does not answer (asyncpg waits on the server for that), drop the connections under it."""
    done, _ = await asyncio.wait({task}, timeout=STOP_BOUND)
    if not done:
        logger.error(
            "%s did not stop in %.0f s: the database does not answer; dropping its connections",
            task.get_name(),
            STOP_BOUND,
        )
        await store.abort()
    await asyncio.gather(task, return_exceptions=True)


STOP_BOUND = 5.0
"""Seconds a cancelled task may take to stop before the database connections are dropped."""


OUTBOX_DRAIN = 5.0
"""Seconds a stopping bot keeps sending what its outbox holds (the rest is sent next start)."""


def _stop_on_signals() -> asyncio.Event:
    """Set on SIGINT or SIGTERM. Installed first thing, so that a stop during start-up is a
    stop too (`serve` cancels the start where it waits)."""
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
    metrics = Metrics()
    traces = configure_tracing()
    try:
        up = asyncio.Event()
        serving = _serve(settings, http=http, port=port, stop=stop, up=up, metrics=metrics)
        await _until_stopped(serving, stop, up)
    finally:
        if traces is not None:
            await asyncio.to_thread(traces.shutdown)  # the last spans, flushed


async def _until_stopped(
    serving: Coroutine[Any, Any, None], stop: asyncio.Event, up: asyncio.Event
) -> None:
    """Run `serving`; a stop before it is up (signing in to a Slack that does not answer, a
    slow recovery) cancels it where it waits, and what it opened closes as on any stop. Once
    it is up it stops by itself, gracefully, when it sees `stop`."""
    task = asyncio.create_task(serving, name="serve")
    stopped = asyncio.create_task(stop.wait(), name="stop signal")
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and not up.is_set():
            logger.info("stopping during start-up")
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _serve(
    settings: Settings,
    *,
    http: bool,
    port: int,
    stop: asyncio.Event,
    up: asyncio.Event,
    metrics: Metrics,
) -> None:
    """The port serves `/healthz`, `/readyz` (not ready until signed in to Slack) and
    `/metrics` from the moment the store is open; in HTTP mode `POST /slack/events` answers
    503 until the app is up. `up` is set once Slack's requests are served."""
    async with open_deps(settings, person=user_mention, observer=metrics) as deps:
        await require_writable(deps.store)  # refused before the port opens (as in `started`)
        # The bot is built before the port opens: `/readyz` asks its parts from the start.
        bot = slack_bot(
            settings, deps, metrics=metrics, expiry_interval=EXPIRY_INTERVAL, pacer=None
        )
        events = SlackEvents()
        web_app = web.Application()
        if http:
            web_app.add_routes([web.post("/slack/events", events.handle)])
        # Without a review channel, a changed MCP tool is told in the log and on /readyz.
        quiet = deps.policy.mcp.review_channel is None
        notes = {"mcp": mcp_quarantine_note(deps.store)} if quiet else {}
        add_operations_routes(web_app, deps.store, metrics, checks=bot.checks, notes=notes)
        plane = PlaneRoutes(deps.policy.plane)
        plane.add_to(web_app)
        async with (
            _listening(web_app, port, http=http),
            started(
                settings, deps, shutdown_grace=settings.opsgate_shutdown_grace, bot=bot
            ) as running,
        ):
            desk = await plane_desk(running.service, deps.store, settings.opsgate_receipt_key)
            with plane.serving(desk):
                if http:
                    bot.signing_in.done()
                    await _serve_http(running, events, port, stop, up)
                else:
                    await _serve_socket_mode(settings, running, bot.signing_in, stop, up)


@contextlib.asynccontextmanager
async def _listening(web_app: web.Application, port: int, *, http: bool) -> AsyncIterator[None]:
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    # A burst of Slack deliveries must not overflow the default backlog of 128.
    site = web.TCPSite(runner, "0.0.0.0", port, backlog=1024)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        what = "Slack's events and /healthz" if http else "/healthz and /metrics"
        raise HealthServerError(
            f"cannot serve {what} on port {port}: {exc.strerror or exc}"
        ) from exc
    logger.info("health and metrics on 0.0.0.0:%d (/healthz, /readyz, /metrics)", port)
    try:
        yield
    finally:
        await runner.cleanup()


async def _serve_http(
    bot: Started, events: SlackEvents, port: int, stop: asyncio.Event, up: asyncio.Event
) -> None:
    with events.serving(bot.app):
        up.set()
        logger.info(
            "OpsGate listening on :%d (POST /slack/events, /healthz, /readyz, /metrics)", port
        )
        await stop.wait()


async def _serve_socket_mode(
    settings: Settings,
    bot: Started,
    signing_in: SignIn,
    stop: asyncio.Event,
    up: asyncio.Event,
) -> None:
    """Socket Mode: Slack over a WebSocket; the port serves only health and metrics."""
    assert settings.slack_app_token is not None
    handler = socket_mode_handler(bot.app, settings.slack_app_token.get_secret_value())
    try:
        await connect_socket_mode(
            handler, signing_in, timeout=max(1.0, settings.opsgate_slack_timeout)
        )
        up.set()
        logger.info("OpsGate connected to Slack (Socket Mode)")
        await stop.wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
