"""Store operations only the tests need, kept off the product's `Store`: starting a run
without the queue, recording a break-glass use without its approval, and reading an answer's
votes. Each takes the store's own in-transaction steps, as its concerns do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from bot.store import GlassUse, Store, VoteValue

__all__ = ["begin_run", "record_break_glass", "votes"]


async def begin_run(store: Store, session_id: str) -> bool:
    """idle|failed -> running, conditional (what `claim_queued` does with a queued message);
    `UnknownSession` for an unknown id (not a lost race)."""
    return await store._claim(session_id, ("idle", "failed"), "running")


async def record_break_glass(
    store: Store,
    ledger_id: str,
    *,
    channel_id: str,
    user_id: str,
    reason: str,
    freeze: str,
    session_id: str | None,
    call_id: str | None,
    details: Mapping[str, Any],
) -> bool:
    """Record a break-glass use on a call and audit `break_glass`, once per call: False when
    the call's glass was broken already (`Store.break_glass` records it with its approval)."""
    use = GlassUse(channel_id, user_id, reason, freeze, details)
    async with store._db.transaction("record_break_glass") as tx:
        return await store._record_glass(tx, ledger_id, use, session_id, call_id)


async def votes(store: Store, session_id: str, message_ts: str) -> dict[str, VoteValue]:
    """Each person's vote on the answer, as it stands."""
    async with store._db.reading("votes") as tx:
        rows = await tx.fetch_all(
            "SELECT user_id, value FROM feedback_votes WHERE session_id = :session "
            "AND message_ts = :ts ORDER BY user_id",
            {"session": session_id, "ts": message_ts},
        )
    found: dict[str, VoteValue] = {}
    for row in rows:
        value = row["value"]
        assert value in get_args(VoteValue), f"unknown vote {value!r}"
        found[str(row["user_id"])] = value
    return found
