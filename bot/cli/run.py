"""`opsgate run [--http [--port N]]`: start the bot, in Socket Mode or serving HTTP."""

from __future__ import annotations

import asyncio

from ..server import serve
from ..settings import load_settings
from ._logging import log_from_settings

__all__ = ["run_bot"]


def run_bot(*, http: bool, port: int | None, verbose: bool = False) -> int:
    """Serve until stopped; settings, policy and database errors propagate to `main`."""
    settings = load_settings(mode="http" if http else "socket")
    log_from_settings(settings, verbose=verbose)
    asyncio.run(serve(settings, http=http, port=port or settings.opsgate_port))
    return 0
