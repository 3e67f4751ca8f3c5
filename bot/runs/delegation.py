"""Delegation while away: `/opsgate delegate @user until <time or duration> [reason]` and
`/opsgate delegate off`.

While it holds, the delegate may decide wherever the delegator may, as "U2 for U1": the
approval is the delegator's (so one person is counted once toward a quorum, never both), the
audit's actor is the delegate with `acting_for` the delegator. A delegate never approves
their own request, and a delegation never chains (the delegator's own delegations are not
followed). It ends by itself (`lapse`, from the expiry timer's tick).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from ..approvals import GateAction, Verdict
from ..words import format_duration, parse_duration
from .context import RunContext
from .gate import OnCall
from .notices import DelegationAnswer

__all__ = ["MAX_DELEGATION", "acting_for", "delegate_command", "lapse"]

MAX_DELEGATION = timedelta(days=90)
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>|([UW][A-Z0-9]{2,})")
USAGE = (
    "Usage: `/opsgate delegate @someone until <2026-12-24T18:00Z or 3d> [reason]`, "
    "or `/opsgate delegate off`."
)


async def delegate_command(ctx: RunContext, user: str, text: str) -> DelegationAnswer:
    """Start or end `user`'s delegation; the answer, in words, for `user` alone."""
    rest = text.strip()
    if rest.lower() == "off":
        ended = await ctx.store.end_delegation(user, "off")
        return _said("Your delegation has ended." if ended else "You have no delegation.")
    parts = rest.split(None, 3)
    found = _MENTION.fullmatch(parts[0]) if parts else None
    if found is None or len(parts) < 3 or parts[1].lower() != "until":
        return _said(USAGE)
    delegate = found[1] or found[2]
    now = ctx.clock()
    until = _until(parts[2], now)
    if delegate == user:
        return _said("You cannot delegate to yourself.")
    if until is None or not now < until <= now + MAX_DELEGATION:
        return _said(f"{parts[2]!r} is not a time within 90 days. " + USAGE)
    reason = parts[3] if len(parts) > 3 else None
    await ctx.store.delegate(user, delegate, until, reason)
    return _said(
        f"<@{delegate}> decides for you until {until:%Y-%m-%d %H:%M} UTC "
        f"({format_duration(until - now, approximate=True)})."
    )


async def acting_for(
    ctx: RunContext, on: OnCall, user: str, team: str | None, action: GateAction
) -> tuple[str, Verdict] | None:
    """The delegator `user` may act for on this call, with the verdict for them; None."""
    if on.row.requested_by == user:
        return None  # a delegate never approves their own request
    for held in await ctx.store.delegations(ctx.clock()):
        if held.delegate != user:
            continue
        verdict = await on.authorize(ctx, action, user=held.delegator, team=team)
        if verdict.kind == "allowed":
            return held.delegator, verdict
    return None


async def lapse(ctx: RunContext) -> int:
    """End the delegations whose time has passed (each once across replicas)."""
    return await ctx.store.end_lapsed_delegations(ctx.clock())


def _until(text: str, now: datetime) -> datetime | None:
    try:
        return now + parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _said(text: str) -> DelegationAnswer:
    return DelegationAnswer(text)
