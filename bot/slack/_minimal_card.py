"""The card posted when Slack refused the full one (`invalid_blocks`): a line naming the tool and
the digest, the arguments in an attached file, and the same buttons. Posting the same blocks
again would be refused again; this one is small and plain enough to go through.

What a human approves must be what runs (docs/architecture.md, "Binding"): the arguments are
only in the file, so a card whose file could not be attached is `locked` (no Approve).
"""

from __future__ import annotations

from typing import Any

from ..runs.views import CardCall
from ._card_body import as_json
from ._text import code_span
from .blocks import approval_card

__all__ = ["minimal_blocks", "minimal_file_text"]


def minimal_file_text(card: CardCall) -> str:
    """The call's full arguments (the attachment the minimal card points to)."""
    arguments = card.arguments
    return arguments if isinstance(arguments, str) else as_json(arguments)


def minimal_blocks(card: CardCall, filename: str) -> list[dict[str, Any]]:
    """A section saying where the arguments are, and the full card's buttons (and lock)."""
    text = (
        f"*Approval needed:* {code_span(card.tool)} wants to run (digest "
        f"{code_span(card.digest[:12])}). The full card could not be drawn; the arguments are "
        f"in the attached file {code_span(filename)}. Read it before deciding."
    )
    full = approval_card(card)
    kept = [b for b in full if b.get("type") == "actions"]
    if card.locked is not None:  # the lock's explanation is the section before the buttons
        kept = full[-2:]
    return [{"type": "section", "text": {"type": "mrkdwn", "text": text, "verbatim": True}}, *kept]
