"""Wake-ups between replicas: LISTEN on a connection of its own, NOTIFY from triggers.

The triggers (migration 7 in `_schema.py`) notify on commit whenever a gated call is decided or
expires, a run is queued or put back, or a session frees its queue slot, whichever process made
the change. A replica listens and skips its own wake-ups (it acts on those itself). A missed
wake-up costs only time: the periodic recovery pass looks at the same things.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal

import asyncpg
from pydantic import BaseModel, ValidationError

from ..errors import StoreError
from ..replicas import Wake
from ._recovery import Recovery
from ._schema import WAKE_CHANNEL

__all__ = ["Wakeups"]

logger = logging.getLogger("bot.store")

_CLOSE_TIMEOUT = 5.0


class _Payload(BaseModel, frozen=True):
    kind: Literal["resume", "queue"]
    key: str
    origin: str = ""


class Wakeups(Recovery):
    def wakeups(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Wake]]:
        """Wake-ups caused by other processes while the context is open (see `WakeSource`)."""
        return self._listening()

    @contextlib.asynccontextmanager
    async def _listening(self) -> AsyncIterator[AsyncIterator[Wake]]:
        heard: asyncio.Queue[Wake | None] = asyncio.Queue()

        def on_notify(conn: Any, pid: int, channel: str, payload: str) -> None:
            wake = self._wake(payload)
            if wake is not None:
                heard.put_nowait(wake)

        def on_lost(conn: Any) -> None:
            heard.put_nowait(None)

        try:
            conn = await asyncpg.connect(
                self.url, server_settings={"application_name": f"{self._origin} listen"}
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"cannot listen for wake-ups on {self.name!r}: {exc}") from exc
        try:
            conn.add_termination_listener(on_lost)
            await conn.add_listener(WAKE_CHANNEL, on_notify)
            yield self._drain(heard)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), _CLOSE_TIMEOUT)

    async def _drain(self, heard: asyncio.Queue[Wake | None]) -> AsyncIterator[Wake]:
        while True:
            wake = await heard.get()
            if wake is None:
                raise StoreError(f"lost the wake-up connection to {self.name!r}")
            yield wake

    def _wake(self, payload: str) -> Wake | None:
        """The wake-up a notification means; None for our own or an unreadable one."""
        try:
            parsed = _Payload.model_validate(json.loads(payload))
        except (ValueError, ValidationError):
            logger.warning("ignored an unreadable wake-up on %s", WAKE_CHANNEL)
            return None
        if parsed.origin == self._origin:
            return None
        return Wake(parsed.kind, parsed.key)
