"""Whether the database takes writes, as the bot last found it: read by the health check.

The bot refuses to start on a database it cannot write; at run time a write can still fail (a
full disk, a file made read-only). Whoever catches such a failure records it here and tells the
person whose message or click was lost; the next write that succeeds clears it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import DatabaseUnwritable

if TYPE_CHECKING:
    from .store import Store

__all__ = ["WriteHealth", "require_writable"]

logger = logging.getLogger("bot.store")


@dataclass
class WriteHealth:
    """`writable` is False from a failed write until the next one that succeeds; `reason` says
    what failed (for `/readyz`)."""

    writable: bool = True
    reason: str | None = None

    def failed(self, what: str, exc: BaseException) -> None:
        if self.writable:
            logger.error("the database refused a write (%s): %s", what, exc)
        self.writable = False
        self.reason = f"{what}: {exc}"

    def succeeded(self) -> None:
        if not self.writable:
            logger.info("the database takes writes again")
        self.writable, self.reason = True, None


async def require_writable(store: Store) -> None:
    """Start-up's check: one write (`Store.probe_write`), else `DatabaseUnwritable`."""
    try:
        await store.probe_write()
    except DatabaseUnwritable:
        raise
    except Exception as exc:  # a StoreError, or a driver's error the backend let through
        raise DatabaseUnwritable(exc) from exc
