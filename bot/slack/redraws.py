"""A card's redraw as a `chat.update`, and the renderer of the outbox's `CARD_REDRAW` rows.

The store writes a card's redraw as an intent (`bot.store.card_redraw`) in the transaction of
the change the card shows; the sender (`bot.slack.outbox`) draws it with `card_renderer` when
it sends it, from the call's state then (the run service's `Cards.drawing`), with the same
builders as a redraw made at once (`card_update`). So a decision and its redraw commit together,
and however late the row is sent, it shows the latest state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..runs.views import CardCall, CardDrawing, CardOutcome, CardRef
from .cards import approval_card, card_text, decided_card, decided_text, minimal_blocks
from .notices import card_file
from .outbox import Renderer, Write
from .turns import RUNS_NEXT

__all__ = ["card_renderer", "card_update"]

Draw = Callable[[str], Awaitable[CardDrawing | None]]
"""The card of a call as its state says it should look now (`Cards.drawing`)."""
Drawn = Callable[[str, str], Awaitable[None]]
"""Record what a card now shows (`Store.card_drawn`)."""


def card_update(
    ref: CardRef, card: CardCall, outcome: CardOutcome | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `chat.update` arguments that redraw the card, and the ones to use instead when
    Slack refuses its blocks (a card posted minimal is redrawn minimal)."""
    if outcome is None:
        blocks, text = approval_card(card), card_text(card)
        fallback = minimal_blocks(card, card_file(card.tool, card.call_id))
    else:
        blocks, text = decided_card(card, outcome), decided_text(card, outcome)
        fallback = []
    params = {"channel": ref.channel_id, "ts": ref.ts, "text": text}
    return {**params, "blocks": blocks}, {**params, "blocks": fallback}


def card_renderer(draw: Draw, drawn: Drawn) -> Renderer:
    """The outbox's renderer for `CARD_REDRAW` rows (params `{"ledger_id": ...}`)."""

    async def render(params: Mapping[str, Any], _retried: bool) -> Write | None:
        # A redraw repeated is the same edit: nothing to look for first.
        ledger_id = str(params.get("ledger_id") or "")
        drawing = await draw(ledger_id)
        if drawing is None:
            return None
        update, fallback = card_update(drawing.ref, drawing.card, drawing.outcome)
        state = drawing.state

        async def sent(_answer: Mapping[str, Any]) -> None:
            await drawn(ledger_id, state)

        outcome = drawing.outcome
        runs = outcome is not None and outcome.status == "approved" and not outcome.ran
        meta = {"fallback": fallback, RUNS_NEXT: runs}
        return Write("chat.update", update, meta, sent)

    return render
