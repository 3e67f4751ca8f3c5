"""`GET /healthz`, `GET /readyz` and `GET /metrics` on `OPSGATE_PORT`, in both modes.

In HTTP mode `add_health_routes` puts them on the app that serves Slack; in Socket Mode, which
has no HTTP server of its own, `serve_health` runs `health_app` alone. Liveness says only that
the process answers; readiness runs the injected checks (the database accepts writes, the
Socket Mode connection is up), each of which returns None when fine or a one-line reason.
Notes are for the operator only (e.g. a quarantined MCP tool with nowhere to review it): they
are listed under `notes` in the answer and never make the bot unready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from bot.errors import HealthServerError

from .logs import mask_secrets
from .metrics import Metrics

if TYPE_CHECKING:
    from ..store import Store, WriteHealth

__all__ = [
    "CHECK_TIMEOUT",
    "HealthServer",
    "ReadinessCheck",
    "ReadinessNote",
    "Refresh",
    "add_health_routes",
    "add_operations_routes",
    "database_check",
    "gauges_refresh",
    "health_app",
    "mcp_quarantine_note",
    "not_ready_reasons",
    "outbox_check",
    "readiness_notes",
    "serve_health",
    "socket_mode_check",
]

logger = logging.getLogger("opsgate.health")

ReadinessCheck = Callable[[], Awaitable[str | None]]
"""One readiness condition: None when it holds, else a one-line reason (no secrets)."""

ReadinessNote = Callable[[], Awaitable[list[str]]]
"""Something the operator should see on `/readyz` that does not stop the bot serving: zero or
more one-line notes (no secrets)."""

Refresh = Callable[[], Awaitable[None]]
"""Run before each scrape, e.g. to set the pending-approval and queue gauges from the database,
which is the truth when several replicas share it."""

CHECK_TIMEOUT: Final = 2.0
"""Seconds a readiness check (or a scrape's refresh) may take before it counts as failed."""


async def not_ready_reasons(
    checks: Mapping[str, ReadinessCheck], *, timeout: float = CHECK_TIMEOUT
) -> list[str]:
    """Run every check at once; the reasons of those that failed, each prefixed by its name.

    A check that raises or outlasts `timeout` fails with that as its reason, so one broken
    dependency cannot hang or crash the probe."""

    async def run(name: str, check: ReadinessCheck) -> str | None:
        try:
            async with asyncio.timeout(timeout):
                reason = await check()
        except TimeoutError:
            reason = f"no answer within {timeout:g}s"
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
        return None if reason is None else mask_secrets(f"{name}: {reason}")

    results = await asyncio.gather(*(run(name, check) for name, check in checks.items()))
    return [reason for reason in results if reason is not None]


async def readiness_notes(
    notes: Mapping[str, ReadinessNote], *, timeout: float = CHECK_TIMEOUT
) -> list[str]:
    """Every note, each prefixed by its name; one that fails says so as its note, since a
    note never decides readiness."""

    async def run(name: str, note: ReadinessNote) -> list[str]:
        try:
            async with asyncio.timeout(timeout):
                said = await note()
        except TimeoutError:
            said = [f"no answer within {timeout:g}s"]
        except Exception as exc:
            said = [f"{type(exc).__name__}: {exc}"]
        return [mask_secrets(f"{name}: {line}") for line in said]

    results = await asyncio.gather(*(run(name, note) for name, note in notes.items()))
    return [line for lines in results for line in lines]


def add_health_routes(
    app: web.Application,
    metrics: Metrics,
    checks: Mapping[str, ReadinessCheck] | None = None,
    *,
    refresh: Refresh | None = None,
    timeout: float = CHECK_TIMEOUT,
    notes: Mapping[str, ReadinessNote] | None = None,
) -> None:
    """Add `/healthz`, `/readyz` and `/metrics` to `app` (HTTP mode: the Slack app).

    `checks` are given whole when the port opens, before the bot is up: each part's check
    says what the part is doing until it is (Slack's: "signing in to Slack")."""
    checks = checks if checks is not None else {}
    notes = notes if notes is not None else {}

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(request: web.Request) -> web.Response:
        reasons, said = await asyncio.gather(
            not_ready_reasons(checks, timeout=timeout), readiness_notes(notes, timeout=timeout)
        )
        extra = {"notes": said} if said else {}
        if reasons:
            return web.json_response({"ready": False, "reasons": reasons, **extra}, status=503)
        return web.json_response({"ready": True, **extra})

    async def metrics_page(request: web.Request) -> web.Response:
        if refresh is not None:
            try:
                async with asyncio.timeout(timeout):
                    await refresh()
            except Exception:  # stale gauges beat no metrics at all
                logger.warning("refreshing metrics before a scrape failed", exc_info=True)
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.add_routes(
        [
            web.get("/healthz", healthz),
            web.get("/readyz", readyz),
            web.get("/metrics", metrics_page),
        ]
    )


def health_app(
    metrics: Metrics,
    checks: Mapping[str, ReadinessCheck] | None = None,
    *,
    refresh: Refresh | None = None,
    timeout: float = CHECK_TIMEOUT,
    notes: Mapping[str, ReadinessNote] | None = None,
) -> web.Application:
    """An app serving only the three endpoints (Socket Mode)."""
    app = web.Application()
    add_health_routes(app, metrics, checks, refresh=refresh, timeout=timeout, notes=notes)
    return app


@dataclass(frozen=True, slots=True)
class HealthServer:
    """Where `serve_health` listens; `port` is the real one when 0 was asked for."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"


@contextlib.asynccontextmanager
async def serve_health(
    *, port: int, host: str = "0.0.0.0", app: web.Application
) -> AsyncIterator[HealthServer]:
    """Serve `app` on `host:port` until the block ends; raises `HealthServerError` (one line)
    when it cannot listen."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise HealthServerError(
                f"cannot serve /healthz and /metrics on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        bound_host, bound_port = runner.addresses[0][:2]
        logger.info("health and metrics on %s:%d (/healthz, /readyz, /metrics)", host, bound_port)
        yield HealthServer(host=str(bound_host), port=int(bound_port))
    finally:
        await runner.cleanup()


class SocketModeConnection(Protocol):
    """What `socket_mode_check` needs: slack_sdk's `SocketModeClient` (`handler.client`)."""

    async def is_connected(self) -> bool: ...


def socket_mode_check(client: SocketModeConnection) -> ReadinessCheck:
    """A readiness check that fails while the Socket Mode connection is down."""

    async def check() -> str | None:
        if await client.is_connected():
            return None
        return "the Socket Mode connection to Slack is down"

    return check


# -- readiness on the store ----------------------------------------------------------------------
# What ready means for OpsGate (the database accepts a write; Slack: signed in and, in Socket
# Mode, connected; the outbox moves) and where the gauges come from: the database, the truth
# when replicas share it. The store is only named in type hints, so the endpoints stay
# importable without it.


def database_check(store: Store, health: WriteHealth | None = None) -> ReadinessCheck:
    """Ready while the store takes a write (a full disk, a lost connection or a read-only file
    all fail it). The answer also updates `health`, which the inbox keeps from its own writes.

    The probe is never cancelled: cancelling a write that waits for a busy SQLite file can leave
    the connection inside a transaction. When `/readyz` gives up on it (`CHECK_TIMEOUT`), it
    runs on to its end, and the next check waits for that one instead of starting another."""
    running: asyncio.Task[None] | None = None

    async def probe() -> None:
        try:
            await store.probe_write()
        except Exception as exc:
            if health is not None:
                health.failed("the readiness probe", exc)
            raise
        if health is not None:
            health.succeeded()

    async def check() -> str | None:
        nonlocal running
        if running is None or running.done():
            running = asyncio.create_task(probe(), name="readiness probe")
            # Its failure is reported by `health` and by the check awaiting it, if any.
            running.add_done_callback(lambda task: task.cancelled() or task.exception())
        try:
            await asyncio.shield(running)  # raises with the reason; `readiness` words it
        except asyncio.CancelledError:
            if health is not None and not running.done():
                health.failed("the readiness probe", TimeoutError("no answer in time"))
            raise
        return None

    return check


def gauges_refresh(store: Store, metrics: Metrics) -> Refresh:
    """Before each scrape: pending approvals and queue depth, counted in the database."""

    async def refresh() -> None:
        metrics.set_pending_approvals(len(await store.pending_approvals()))
        metrics.set_queue_depth(len(await store.queue_items(states=("queued",))))

    return refresh


OUTBOX_STUCK_SECONDS = 300.0
"""Not ready when writes wait in the outbox and none was finished for this long."""


def outbox_check(stuck_for: Callable[[], float]) -> ReadinessCheck:
    """`stuck_for()`: seconds the outbox's sender has made no progress with writes waiting."""

    async def check() -> str | None:
        seconds = stuck_for()
        if seconds > OUTBOX_STUCK_SECONDS:
            return f"the Slack outbox has sent nothing for {seconds:.0f} s with writes waiting"
        return None

    return check


def mcp_quarantine_note(store: Store) -> ReadinessNote:
    """Each quarantined MCP tool, from the store (the truth across replicas): for a bot with no
    `[mcp] review_channel`, where the log and `/readyz` are where a change is seen. The bot
    stays ready: the tool's calls already wait for a person."""

    async def note() -> list[str]:
        return [
            f"MCP tool {pin.server}__{pin.tool} changed since it was reviewed (listed digest "
            f"{pin.listed_digest}); quarantined: every call needs approval until an MCP admin "
            "accepts the new definition"
            for pin in await store.mcp_pins()
            if pin.state == "quarantined"
        ]

    return note


def add_operations_routes(
    web_app: web.Application,
    store: Store,
    metrics: Metrics,
    health: WriteHealth | None = None,
    *,
    checks: Mapping[str, ReadinessCheck] | None = None,
    notes: Mapping[str, ReadinessNote] | None = None,
) -> None:
    """`/healthz`, `/readyz` and `/metrics` on `web_app` (beside `POST /slack/events` in HTTP
    mode), their gauges counted in `store`. `checks`: the readiness checks, one per part of the
    bot (`bot.wiring.slack_bot` builds them), else the database's alone; `notes`: what
    `/readyz` also says."""
    if checks is None:
        checks = {"database": database_check(store, health)}
    add_health_routes(web_app, metrics, checks, refresh=gauges_refresh(store, metrics), notes=notes)
