"""Readiness and gauges of a running bot, on the store it runs on.

The rest of `bot.observability` is store-free (the endpoints, `Metrics`); this module says what
"ready" means for OpsGate (the database accepts a write, and in Socket Mode the connection is
up) and where the gauges come from (the database, the truth when replicas share it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from aiohttp import web

from ..store import Store, WriteHealth
from .health import (
    ReadinessCheck,
    ReadinessNote,
    Refresh,
    SocketModeConnection,
    add_health_routes,
    socket_mode_check,
)
from .metrics import Metrics

__all__ = [
    "add_operations_routes",
    "database_check",
    "gauges_refresh",
    "mcp_quarantine_note",
    "operations_checks",
    "outbox_check",
]


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


def operations_checks(
    store: Store,
    health: WriteHealth | None = None,
    more: Mapping[str, ReadinessCheck] | None = None,
    *,
    socket: SocketModeConnection | None = None,
) -> dict[str, ReadinessCheck]:
    """The database's check, `more`, and in Socket Mode the connection's. A dict the server
    adds to while it starts: the endpoints read it at each probe."""
    checks = {"database": database_check(store, health), **(more or {})}
    if socket is not None:
        checks["slack"] = socket_mode_check(socket)
    return checks


def add_operations_routes(
    web_app: web.Application,
    store: Store,
    metrics: Metrics,
    health: WriteHealth | None = None,
    more: Mapping[str, ReadinessCheck] | None = None,
    *,
    checks: Mapping[str, ReadinessCheck] | None = None,
    notes: Mapping[str, ReadinessNote] | None = None,
) -> None:
    """`/healthz`, `/readyz` and `/metrics` on `web_app` (beside `POST /slack/events` in HTTP
    mode), their gauges counted in `store`. `checks`: the readiness checks, read live (else
    `operations_checks(store, health, more)`); `notes`: what `/readyz` also says."""
    if checks is None:
        checks = operations_checks(store, health, more)
    add_health_routes(web_app, metrics, checks, refresh=gauges_refresh(store, metrics), notes=notes)
