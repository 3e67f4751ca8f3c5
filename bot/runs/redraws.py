"""The card redraws the store owes, drawn in this process: the sender of a front end with no
Slack (the terminal's `opsgate chat`).

Every change a card shows writes the card's redraw (`CARD_REDRAW`, an outbox row) in the
change's own transaction (`bot.store.outbox`). In Slack the outbox's sender draws and sends
those rows (`bot.slack.outbox`); without Slack, `LocalRedraws.drain` claims them, draws each
card from its call's state now (`Cards.refresh`, which records what the card shows) and marks
the row done. It runs where the front end needs its screen current (before a prompt).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from ..store import CARD_REDRAW, OutboxRow
from .cards import Cards

__all__ = ["LocalRedraws"]

logger = logging.getLogger("opsgate.runs")

_LEASE = timedelta(seconds=60)
_BATCH = 1000


class LocalRedraws:
    """Draws the redraws owed to `cards`' output. `channel`: only that channel's (a Slack bot
    sharing the database keeps its own: they are left to its sender); None: every card's."""

    def __init__(self, cards: Cards, *, channel: str | None, claimer: str = "local") -> None:
        self.cards = cards
        self.channel = channel
        self.claimer = claimer

    async def drain(self) -> int:
        """Draw every redraw owed now, once each; how many cards were drawn."""
        store = self.cards.ctx.store
        drawn = 0
        for row in await store.claim_outbox(self.claimer, limit=_BATCH, lease=_LEASE):
            if not self._ours(row):
                await store.outbox_later(row.id, self.cards.ctx.clock(), "left to its sender")
                continue
            try:
                call = await store.get_call(str(row.params.get("ledger_id") or ""))
                if call is not None:
                    await self.cards.refresh(call)
                    drawn += 1
                await store.outbox_sent(row.id)
            except Exception:  # a redraw is not worth ending the chat: drawn again later
                logger.exception("could not redraw the card of %s", row.params.get("ledger_id"))
        return drawn

    def _ours(self, row: OutboxRow) -> bool:
        return row.method == CARD_REDRAW and self.channel in (None, row.channel_id)
