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
from typing import Final, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from bot.errors import HealthServerError

from .logs import mask_secrets
from .metrics import Metrics

__all__ = [
    "CHECK_TIMEOUT",
    "HealthServer",
    "ReadinessCheck",
    "ReadinessNote",
    "Refresh",
    "add_health_routes",
    "health_app",
    "not_ready_reasons",
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

    `checks` is read at each probe, not copied: a starting bot adds its checks as its parts
    come up (Slack's sign-in first, the Socket Mode connection once it is made)."""
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
