"""A click whose decision the database refused (full disk, read-only file): the clicker is told
privately that it was not saved, and the write health that `/readyz` reads records it.

The click was acknowledged already (Slack got its 200 at once); what it asked for did not
happen, so the person must know to click again once the operator fixed the database.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from ...runs.notices import NotSaved
from ...runs.output import Thread
from ...runs.service import RunService
from ...store import StoreError
from ..output import SlackThreadOutput

__all__ = ["click_saved"]

logger = logging.getLogger("opsgate.slack.clicks")


@contextlib.asynccontextmanager
async def click_saved(
    service: RunService,
    output: SlackThreadOutput,
    *,
    user: str,
    ledger_id: str,
    thread: Thread | None,
) -> AsyncIterator[None]:
    """Run the click's work; a `StoreError` from it is recorded, told and not raised."""
    try:
        yield
    except StoreError as exc:
        service.ctx.health.failed("saving a click", exc)
        logger.error("a click by %s on %s was not saved: %s", user, ledger_id, exc)
        if thread is None:
            with contextlib.suppress(StoreError):  # reading may fail too: nowhere to answer
                thread = await service.decisions.thread_of_call(ledger_id)
        if thread is not None:
            await output.tell(thread, user, NotSaved("click"))
