"""The outbox rows' turns at Slack's workspace-wide buckets: what a person waits for goes first
(`Turns`), and rows put back until their bucket can take them (`PutBack`). The buckets
themselves, and the waiting for a token, are `bot.slack.pacing`'s."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta

from .pacing import Pacer

__all__ = ["CARD_SETTLE", "QUIET_SETTLE", "RUNS_NEXT", "TURN_MAX", "PutBack", "Turns"]

logger = logging.getLogger("opsgate.slack.outbox")


class PutBack:
    """Outbox rows a sender put back until their bucket can take them, and when each is due:
    still owed while they wait (forgotten once well past due: sent by another replica,
    superseded or cancelled meanwhile), and the sender looks again when the first is due."""

    def __init__(self) -> None:
        self._due: dict[str, datetime] = {}

    def add(self, row_id: str, due: datetime) -> None:
        self._due[row_id] = due

    def discard(self, row_id: str) -> None:
        self._due.pop(row_id, None)

    def __contains__(self, row_id: object) -> bool:
        return row_id in self._due

    def __len__(self) -> int:
        return len(self._due)

    def ids(self) -> list[str]:
        return list(self._due)

    def keep(self, row_ids: set[str]) -> None:
        """Forget the rows not in `row_ids` (gone from the outbox)."""
        self._due = {row: due for row, due in self._due.items() if row in row_ids}

    async def owed(
        self,
        now: datetime,
        grace: timedelta,
        kept: Callable[[Sequence[str]], Awaitable[set[str]]],
    ) -> bool:
        """Whether rows put back are still owed: those well past due (`grace`) are forgotten,
        and of the rest those no longer in the outbox (`kept`: cancelled, superseded, sent by
        another replica). Unread (the database): still owed."""
        self._due = {row: due for row, due in self._due.items() if now - due <= grace}
        if self._due:
            try:
                self.keep(await kept(self.ids()))
            except Exception:
                logger.exception("could not read which put-back outbox rows are left")
        return bool(self._due)

    def next_look(self, now: datetime, poll: float) -> float:
        """Seconds until the sender looks again: the poll, or sooner for a row put back."""
        if not self._due:
            return poll
        soonest = (min(self._due.values()) - now).total_seconds()
        return min(poll, max(0.01, soonest))


# Turns at the workspace-wide buckets: what a person waits for goes first, and a storm's
# redraws fold into one.
#
# `chat.update` (Tier 3) and `views.publish` are spent by the whole workspace, every channel
# together. While such a bucket is short (a storm), an outbox row waits for a call of it here
# rather than queueing at the pacer (first come, first served): a card's redraw for the next
# call, a row after the answers (a notice's edit, a Home tab) also while a card's redraw waits
# for the same bucket, so cards go first. Each time a row may go after a wait, it asks whether a
# newer row of its key superseded it (then it is not sent: its newer row draws the latest).
#
# The redraw of a card approved and about to run (its write's `meta[RUNS_NEXT]`, set by
# `bot.slack.cards`) that finds `chat.update` being spent (a storm: part of its burst went in
# the last seconds) first settles, while it is being spent and up to `CARD_SETTLE`: the call runs
# a moment after its decision, and its result owes the card another redraw; superseded meanwhile,
# one `chat.update` shows the decision and the result, where two were spent before (the approval
# storms' redraws were 40% more than their cards). Once per card in a process: the redraw
# superseding it goes in its turn at once. Outside a storm it settles too, up to `QUIET_SETTLE`:
# a storm's first clicks find the bucket full, and a call that runs at once is then shown run by
# one redraw a moment after its click. A card rejected or run is redrawn at once.
RUNS_NEXT = "runs_next"
"""The key of a card redraw's meta saying its call is approved and has not run yet."""
CARD_SETTLE = 3.0
"""Longest a card's redraw in a storm waits for its call's result (see the module)."""
QUIET_SETTLE = 1.0
"""Longest it waits outside a storm: a storm's first clicks cannot see it coming, and a call
that runs at once is shown run by one redraw, a moment after the click."""
SETTLE_LOOK = 0.25
"""How often a settling redraw asks whether the result's redraw superseded it."""
TURN_SECONDS = 0.05
"""How often a row waiting for its bucket to refill looks again."""
TURN_MAX = 30.0
"""Longest a row lets others go first (a storm of cards never starves a notice for good)."""
_SETTLED_KEPT = 4096
"""Cards remembered as settled (the oldest forgotten first)."""


class Turns:
    """The turns of one sender's rows at the buckets of `pacer` (None: not paced, no turns)."""

    def __init__(self, pacer: Pacer | None) -> None:
        self.pacer = pacer
        self._cards: dict[str, int] = {}
        """Cards' redraws waiting for a call of each method (rows after them let them go)."""
        self._settled: OrderedDict[str, None] = OrderedDict()
        """The keys of cards whose redraw settled once already."""

    async def wait(
        self,
        method: str,
        *,
        card: bool,
        key: str | None,
        superseded: Callable[[], Awaitable[bool]],
        runs_next: bool = False,
    ) -> bool:
        """Until the row (a card's redraw when `card`; of a call about to run, `runs_next`) may
        make its call of `method`: True without a pause once it may go, so the caller's send
        reserves that call before any other task runs; False when it was superseded while it
        waited (done, unsent)."""
        pacer = self.pacer
        if pacer is None:
            return True
        if (
            card
            and runs_next
            and key is not None
            and await self._settle(pacer, method, key, superseded)
        ):
            return False
        short = pacer.short

        def blocked() -> bool:
            return short(method) or (not card and self._cards.get(method, 0) > 0)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + TURN_MAX  # then in turn, as any call
        self._cards[method] = self._cards.get(method, 0) + card
        try:
            while blocked() and loop.time() < deadline:
                await asyncio.sleep(TURN_SECONDS)
                if not blocked() and await superseded():
                    return False
            return True
        finally:
            self._cards[method] -= card

    async def _settle(
        self, pacer: Pacer, method: str, key: str, superseded: Callable[[], Awaitable[bool]]
    ) -> bool:
        """When `method` is being spent and the card has not settled yet: wait for a newer
        redraw of it while the bucket is spent, up to `CARD_SETTLE` (a full bucket is spent at
        once); whether one superseded this one."""
        if method != "chat.update" or key in self._settled:
            return False
        self._settled[key] = None
        while len(self._settled) > _SETTLED_KEPT:
            self._settled.popitem(last=False)
        loop = asyncio.get_running_loop()
        storm = pacer.busy(method)
        deadline = loop.time() + (CARD_SETTLE if storm else QUIET_SETTLE)
        while loop.time() < deadline and (not storm or pacer.busy(method)):
            await asyncio.sleep(SETTLE_LOOK)
            if await superseded():
                return True
        return False
