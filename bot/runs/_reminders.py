"""Reminders before approvals expire: one notice per thread batch, naming every call in it.

A batch's cards share one deadline, so they come due together; a 30-call batch gets one
reminder, not 30. `Store.due_reminders` marks each call reminded once across all stores.
"""

from __future__ import annotations

from collections import defaultdict

from ..store import ToolCallRow
from ._cards import Cards
from ._context import RunContext
from .notices import Reminder

__all__ = ["send_reminders"]


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
        thread = await cards.thread(rows[0])
        if thread is None:
            continue
        links = tuple([await cards.link(row) for row in rows])
        expires_at = min(row.expires_at for row in rows if row.expires_at is not None)
        await ctx.output.say(thread, Reminder(links, expires_at))
        posted += 1
    return posted
