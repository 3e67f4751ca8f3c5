"""Starts queued runs, per channel, while the channel has fewer than its `concurrency` running.

The queue lives in the store, so a burst of alerts or a restart loses nothing; every claim is
one conditional transaction there (`Store.claim_queued`), so however many tasks kick the
dispatcher at once, no channel goes over its limit and no message starts twice. It is kicked
whenever a slot may have freed or work arrived: after a message is queued, when a run ends
(answered, failed or paused for approval), and at start-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..policy import Policy
from ..store import QueueItem, Store

__all__ = ["Dispatcher"]

logger = logging.getLogger("opsgate.dispatcher")


class Dispatcher:
    """`start(item)` must start the item's run in the background (and may raise `RuntimeError`
    when the bot is shutting down: the item then goes back to the queue for the next start)."""

    def __init__(self, store: Store, policy: Policy, start: Callable[[QueueItem], None]) -> None:
        self.store = store
        self.policy = policy
        self._start = start

    async def kick(self, channel: str) -> list[QueueItem]:
        """Start queued runs of `channel` while it has free slots; returns the ones started."""
        limit = self.policy.concurrency_for(channel)
        started: list[QueueItem] = []
        while (item := await self.store.claim_queued(channel, limit=limit)) is not None:
            try:
                self._start(item)
            except RuntimeError:
                logger.info("not starting queued item %d of %s: shutting down", item.id, channel)
                await self.store.release_queued(item.id)
                break
            except BaseException:
                await self.store.release_queued(item.id)
                raise
            started.append(item)
        return started

    async def kick_all(self) -> list[QueueItem]:
        """Start what every channel can (at start-up: what was queued before the restart)."""
        started: list[QueueItem] = []
        for channel in await self.store.queued_channels():
            started += await self.kick(channel)
        return started
