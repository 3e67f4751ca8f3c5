"""Helpers shared by the benchmarks: percentiles, RSS, timing, the machine line, a table printer.

Underscored so `make bench` (which runs every `bench/*.py`) does not run it as a benchmark.
Machines are noisy, so every figure is printed beside a floor measured in the same run; `ratio`
and `Table` exist to make that the easy thing to do.
"""

from __future__ import annotations

import math
import os
import platform
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

__all__ = [
    "REPO",
    "Checks",
    "Table",
    "bare_bolt_app",
    "db_bytes",
    "machine",
    "ms",
    "p50",
    "p99",
    "percentile",
    "ratio",
    "rss_bytes",
    "serve_bolt",
    "timed",
    "timed_result",
]

REPO = Path(__file__).resolve().parent.parent

_T = TypeVar("_T")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, not {q!r}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def p50(values: Sequence[float]) -> float:
    return percentile(values, 50)


def p99(values: Sequence[float]) -> float:
    return percentile(values, 99)


def rss_bytes() -> int:
    """This process's resident set size, from `VmRSS` in /proc/self/status (Linux only)."""
    status = Path("/proc/self/status")
    try:
        text = status.read_text()
    except OSError as exc:
        raise RuntimeError(f"cannot read {str(status)!r} (RSS needs Linux): {exc}") from exc
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            amount, unit = line.split()[1:3]
            if unit.lower() != "kb":
                raise RuntimeError(f"unexpected VmRSS unit {unit!r} in {str(status)!r}")
            return int(amount) * 1024
    raise RuntimeError(f"no VmRSS line in {str(status)!r}")


def db_bytes(path: Path) -> int:
    """An SQLite database's size on disk: the file plus its WAL and shared-memory files."""
    return sum(
        candidate.stat().st_size
        for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
        if candidate.exists()
    )


async def timed(pending: Awaitable[object]) -> float:
    """Seconds to run a (not yet started) awaitable."""
    started = time.perf_counter()
    await pending
    return time.perf_counter() - started


async def timed_result(pending: Awaitable[_T]) -> tuple[float, _T]:
    """Seconds to run a (not yet started) awaitable, and its result."""
    started = time.perf_counter()
    result = await pending
    return time.perf_counter() - started, result


def ms(seconds: float) -> str:
    """Seconds as milliseconds, three significant-ish digits."""
    value = seconds * 1e3
    return f"{value:.3f} ms" if value < 10 else f"{value:.1f} ms"


def ratio(value: float, floor: float) -> str:
    """`value / floor` as `1.07x` (or `n/a` for a zero floor)."""
    return f"{value / floor:.2f}x" if floor else "n/a"


def machine() -> str:
    """The line every benchmark starts with, so a figure is never quoted without its machine."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"machine: {cpus} CPU(s) (nproc), Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {platform.system()} {platform.release()}"
    )


def bare_bolt_app(slack_url: str, signing_secret: str) -> AsyncApp:
    """The floor of the Slack-facing figures: a Bolt app that only acknowledges.

    It verifies signatures like OpsGate's app (same secret), acks Approve clicks and
    `app_mention` events, and does nothing else.
    """
    from slack_bolt.async_app import AsyncAck, AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.slack.ids import ACTION_APPROVE

    client = AsyncWebClient(token="xoxb-bench-token", base_url=slack_url)
    app = AsyncApp(client=client, signing_secret=signing_secret)

    @app.action(ACTION_APPROVE)
    async def only_ack(ack: AsyncAck) -> None:
        await ack()

    @app.event("app_mention")
    async def ignore_mention() -> None:
        """Events are acknowledged by Bolt itself before any listener runs."""

    return app


@asynccontextmanager
async def serve_bolt(app: AsyncApp) -> AsyncIterator[str]:
    """Serve a Bolt app on loopback the way OpsGate's HTTP mode does; yields its events URL."""
    from bot.server import http_app
    from tests.support.loopback import serve_on_loopback

    runner, base = await serve_on_loopback(http_app(app))
    try:
        yield f"{base}/slack/events"
    finally:
        await runner.cleanup()


class Table:
    """Rows printed with aligned columns; the first column is left-aligned, the rest right."""

    def __init__(self, *headers: str) -> None:
        self.headers = headers
        self.rows: list[tuple[str, ...]] = []

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"row {cells!r} has {len(cells)} cells, not {len(self.headers)}")
        self.rows.append(tuple(str(cell) for cell in cells))

    def render(self) -> str:
        widths = [
            max(len(row[i]) for row in [self.headers, *self.rows]) for i in range(len(self.headers))
        ]

        def line(cells: Sequence[str]) -> str:
            first, *rest = cells
            parts = [first.ljust(widths[0])]
            parts += [cell.rjust(width) for cell, width in zip(rest, widths[1:], strict=True)]
            return "  ".join(parts).rstrip()

        rule = "  ".join("-" * width for width in widths)
        return "\n".join([line(self.headers), rule, *(line(row) for row in self.rows)])

    def print(self) -> None:
        print(self.render(), flush=True)


class Checks:
    """Correctness checks a benchmark makes on what it measured; any failure exits non-zero."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        print(f"check: {what}: {'ok' if ok else 'FAILED'}", flush=True)
        if not ok:
            self.failures.append(what)

    def exit_on_failure(self) -> None:
        if self.failures:
            print(f"{len(self.failures)} check(s) failed: {self.failures!r}", file=sys.stderr)
            raise SystemExit(1)
