"""The expiry timer: wakes at the earliest deadline (a card's expiry, or its reminder), not on a
fixed poll, so a card expires within about a second of its time.

It also wakes when a new deadline is set (`poke`), and at least every `longest` seconds: a
card posted by another replica sharing the database is seen that way. What it runs each time
(`RunService.expire_due`) claims every reminder and expiry in the store, so replicas whose timers
fire together still act once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Final

from ..store import Store, ToolCallRow
from .cards import Cards
from .context import RunContext, thread_of
from .notices import Reminder

__all__ = ["LATE_BY", "ExpiryTimer", "send_reminders"]


logger = logging.getLogger("opsgate.runs")

LATE_BY: Final = 0.05
"""Seconds added to each wait, so the timer never wakes a hair before the deadline (the loop's
clock and the wall clock drift apart a little) and then sleeps a whole round."""

Wait = Callable[[float, asyncio.Event], Awaitable[None]]
"""Sleep up to `seconds` or until the event is set (tests replace it to move a fake clock)."""


async def _wait(seconds: float, wake: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.wait(), seconds)


class ExpiryTimer:
    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], datetime],
        remind_before: timedelta | None,
        longest: float = 15.0,
        wait: Wait = _wait,
    ) -> None:
        self.store = store
        self.clock = clock
        self.remind_before = remind_before
        self.longest = longest
        self._wait = wait
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """A deadline was set: look again now (it may be earlier than the one waited for)."""
        self._wake.set()

    async def next_delay(self) -> float:
        """Seconds until the next expiry or reminder is due (at most `longest`)."""
        due = await self.store.next_expiry()
        if due is None:
            return self.longest
        now = self.clock()
        moments = [due]
        if self.remind_before is not None and due - self.remind_before > now:
            moments.append(due - self.remind_before)
        seconds = min(m - now for m in moments).total_seconds()
        return max(0.0, min(self.longest, seconds + LATE_BY))

    async def run(self, tick: Callable[[], Awaitable[Any]]) -> None:
        """Run `tick` at each deadline, until cancelled (the task's owner does that)."""
        while True:
            self._wake.clear()  # a poke during the tick makes the next wait return at once
            delay = self.longest
            try:
                await tick()
                delay = await self.next_delay()
            except Exception:
                logger.exception("expiring approvals failed")
            await self._wait(delay, self._wake)


# -- reminders -----------------------------------------------------------------------------------
# Reminders before approvals expire: one notice per thread batch, naming every call in it.
#
# A batch's cards share one deadline, so they come due together; a 30-call batch gets one
# reminder, not 30. `Store.due_reminders` marks each call reminded once across all stores.


async def send_reminders(ctx: RunContext, cards: Cards) -> int:
    """Post the reminders due now; returns how many notices were posted."""
    before = ctx.policy.remind_before
    if before is None:
        return 0
    batches: dict[tuple[str, str | None], list[ToolCallRow]] = defaultdict(list)
    for row in await ctx.store.due_reminders(before, ctx.clock()):
        if row.expires_at is not None:
            batches[(row.session_id, row.batch_id)].append(row)
    posted = 0
    for rows in batches.values():
        thread = await thread_of(ctx, rows[0])
        if thread is None:
            continue
        links = tuple([await cards.link(row) for row in rows])
        expires_at = min(row.expires_at for row in rows if row.expires_at is not None)
        await ctx.output.say(thread, Reminder(links, expires_at))
        posted += 1
    return posted
