"""Another try for a card Slack refused (rate limited past slack_sdk's retries, a 5xx, a
timeout), while the bot runs: a few tries over about a minute, in an owned background task.
The thread was told at the first failure; it is told again if the last try fails too (then the
next start-up tries once more). A call decided, cancelled or expired meanwhile is not posted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..store import ToolCallRow
from ._context import RunContext
from .notices import CardNotPosted
from .output import Thread

__all__ = ["CARD_RETRY_DELAYS", "CardRetries"]

logger = logging.getLogger("opsgate.runs")

CARD_RETRY_DELAYS: tuple[float, ...] = (5.0, 15.0, 40.0)
"""Seconds before each further try (after the first failure)."""

PostOnce = Callable[[Thread, ToolCallRow, list[ToolCallRow]], Awaitable[str | None]]
"""Post one card; the error when it failed, else None."""


class CardRetries:
    def __init__(self, ctx: RunContext, post_once: PostOnce) -> None:
        self.ctx = ctx
        self._post_once = post_once
        self.delays = CARD_RETRY_DELAYS
        """Tests shorten them."""

    def start(self, thread: Thread, row: ToolCallRow, error: str) -> None:
        """Try again in the background (nothing when shutting down: the next start-up does)."""
        if self.ctx.tasks.closed or not self.delays:
            return
        self.ctx.tasks.spawn(
            self._retry(thread, row.id, row.tool, error), name=f"card retry {row.id}", service=True
        )

    async def _retry(self, thread: Thread, ledger_id: str, tool: str, error: str) -> None:
        store = self.ctx.store
        for delay in self.delays:
            await asyncio.sleep(delay)
            row = await store.get_call(ledger_id)
            if row is None or row.status != "pending" or row.card_ts is not None:
                return
            failed = await self._post_once(thread, row, await store.batch_calls(row.session_id))
            if failed is None:
                logger.info("the card for %s was posted on a later try", ledger_id)
                return
            error = failed
        logger.error("gave up posting the card for %s: %s", ledger_id, error)
        await self.ctx.output.say(thread, CardNotPosted(tool, error, gave_up=True))
