"""Serving an aiohttp app on a free loopback port: what every stand-in and the harness do."""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["serve_on_loopback"]


async def serve_on_loopback(
    app: web.Application, **runner_options: Any
) -> tuple[web.AppRunner, str]:
    """Start `app` on 127.0.0.1 at a port the kernel picks. Returns the runner (call its
    `cleanup()` to stop) and the base URL, `http://127.0.0.1:<port>`."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"
