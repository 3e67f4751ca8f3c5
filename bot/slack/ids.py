"""Which arguments a clicked card showed: its decision buttons' `block_id` carries the digest.

The button value stays the opaque ledger id (docs/architecture.md, semantics 5); the digest
rides in the actions block's id, which Slack echoes with every click. An Approve or "Allow for"
click whose digest is not the call's current one came from a card drawn before an edit, and the
store refuses it (`ArgumentsChanged`) instead of counting it toward the edited call.
"""

from __future__ import annotations

import re

__all__ = ["decision_block_id", "shown_digest"]

_PREFIX = "opsgate_decision"
_BOUND = re.compile(rf"^{_PREFIX}:([0-9a-f]{{1,64}})(?::[0-9A-Za-z_-]{{1,64}})?$")


def decision_block_id(digest: str, ledger_id: str | None = None) -> str:
    """The block id of a card's buttons: the digest it shows, and on the Home tab (many cards
    in one view, block ids unique) the ledger id too."""
    return f"{_PREFIX}:{digest}" + (f":{ledger_id}" if ledger_id else "")


def shown_digest(block_id: object) -> str | None:
    """The digest a click's card showed; None for a card drawn without one."""
    found = _BOUND.match(block_id) if isinstance(block_id, str) else None
    return found.group(1) if found else None
