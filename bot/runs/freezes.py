"""Change freezes at run time: which freeze blocks a call now, what its card shows, and the
announcements of each freeze window's start and end.

A freeze comes from the policy (`[[freezes]]`) or from `/opsgate freeze` (a store row, so it
holds on every replica). While one covers a gated call's channel and tool, the call's card has
no Approve, Edit or Allow (the one gate refuses them: `frozen`), an allowance does not cover it,
and, where the policy sets `break_glass`, the card offers "Break glass". Each window's start
and end is claimed once in the store (`claim_freeze_notice`, with its audit row), announced in
the channels it covers, and the pending cards there are redrawn: at the end with their buttons.
The expiry timer runs `tick` (every 15 s at most, and in tests on an injected clock).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from ..policy import ActiveFreeze, GateDecision, Policy, freeze_name
from ..store import FreezeRow, ToolCallRow
from .context import RunContext
from .notices import FreezeAnnounced
from .output import Thread
from .views import CardCall, FreezeInfo, GlassInfo

__all__ = [
    "RedrawPending",
    "active_freezes",
    "freeze_for",
    "freeze_info",
    "freeze_summary",
    "freeze_words",
    "glass_info",
    "tick",
    "with_freeze",
]

logger = logging.getLogger("opsgate.runs")

Refresh = Callable[[ToolCallRow], Awaitable[None]]
"""Redraw one card (`Cards.refresh`)."""

_ENDED_LOOKBACK = timedelta(days=1)
"""How far back ad hoc freezes are looked at for an end to announce."""


def _ad_hoc(row: FreezeRow) -> ActiveFreeze:
    return ActiveFreeze(
        key=f"adhoc:{row.id}",
        label="ad hoc freeze",
        started_at=row.starts_at,
        until=row.ends_at,
        message=row.reason,
        channels=(row.channel_id,),
        started_by=row.started_by,
    )


async def active_freezes(
    ctx: RunContext, now: datetime | None = None, *, channel: str | None = None
) -> list[ActiveFreeze]:
    """Every freeze in force at `now` (the clock's): the policy's, then the ad hoc ones (only
    `channel`'s, when given: ad hoc freezes are per channel)."""
    moment = now or ctx.clock()
    found = ctx.policy.active_freezes(moment)
    for row in await ctx.store.ad_hoc_freezes(ending_after=moment, channel_id=channel):
        if row.starts_at <= moment:
            found.append(_ad_hoc(row))
    return found


async def freeze_for(ctx: RunContext, channel: str, tool: str) -> ActiveFreeze | None:
    """The freeze that blocks a gated call of `tool` in `channel` now (the one lasting
    longest, when several do), or None."""
    found = await active_freezes(ctx, channel=channel)
    covering = [f for f in found if f.covers(channel, tool)]
    return max(covering, key=lambda f: f.until) if covering else None


def freeze_words(freeze: ActiveFreeze) -> str:
    """How a refusal names the freeze: `freezes[0] until 2026-12-07T08:00:00+00:00`."""
    return f"{freeze.label} until {freeze.until.isoformat()}"


def freeze_info(freeze: ActiveFreeze) -> FreezeInfo:
    return FreezeInfo(
        label=freeze.label,
        until=freeze.until,
        message=freeze.message,
        channels=freeze.channels,
        started_by=freeze.started_by,
    )


async def glass_info(ctx: RunContext, ledger_id: str) -> GlassInfo | None:
    row = await ctx.store.break_glass_of(ledger_id)
    if row is None:
        return None
    return GlassInfo(
        ledger_id=row.ledger_id,
        channel=row.channel_id,
        broken_by=row.broken_by,
        reason=row.reason,
        freeze=row.freeze_key,
        broken_at=row.broken_at,
        reviewed_by=row.reviewed_by,
    )


async def with_freeze(
    ctx: RunContext, card: CardCall, row: ToolCallRow, channel: str, decision: GateDecision
) -> CardCall:
    """The card as a freeze (and a break-glass use) changes it: a pending gated call under a
    freeze says which and until when, offers no Approve (and "Break glass" where the policy
    says so); a call whose glass was broken keeps "Mark reviewed" until it is reviewed.
    `decision`: the policy's verdict on the call (`call_decision`)."""
    glass = await glass_info(ctx, row.id)
    if row.status != "pending" or not row.needs_approval:
        return dataclasses.replace(card, glass=glass) if glass is not None else card
    freeze = await freeze_for(ctx, channel, row.tool)
    if freeze is None:
        return dataclasses.replace(card, glass=glass) if glass is not None else card
    return dataclasses.replace(
        card,
        frozen=freeze.label,
        frozen_until=freeze.until,
        freeze_message=freeze.message,
        break_glass=decision.break_glass and not decision.forbidden and card.locked is None,
        glass=glass,
    )


def freeze_summary(policy: Policy) -> str:
    """The policy's freezes and break-glass in plain words, for the Home tab's paragraph
    ("" when the file has none of them)."""
    parts = []
    for index, spec in enumerate(policy.freezes):
        where = f" in {', '.join(spec.channels)}" if spec.channels is not None else ""
        tools = f" for {', '.join(spec.tools)}" if spec.tools is not None else ""
        parts.append(f"{freeze_name(index)} ({spec.words()}{where}{tools})")
    text = f" Change freezes: {'; '.join(parts)}." if parts else ""
    admins = policy.defaults.freeze_admins
    if admins:
        text += f" Ad hoc freezes (/opsgate freeze) by: {', '.join(admins)}."
    breakers = policy.defaults.break_glass_approvers
    if breakers:
        text += (
            f" Break glass during a freeze (where break_glass is set) by: {', '.join(breakers)}."
        )
    return text


# -- announcements ---------------------------------------------------------------------------


def _channels(ctx: RunContext, freeze: ActiveFreeze) -> tuple[str, ...]:
    """Where a freeze is announced: its channels, else the policy's `defaults.channels`, else
    the channels the policy has a section for."""
    if freeze.channels is not None:
        return freeze.channels
    listed = ctx.policy.defaults.channels
    return tuple(listed) if listed is not None else tuple(ctx.policy.channels_policy)


def _details(freeze: ActiveFreeze) -> dict[str, object]:
    return {
        "freeze": freeze.key,
        "label": freeze.label,
        "started_at": freeze.started_at.isoformat(),
        "until": freeze.until.isoformat(),
        "channels": list(freeze.channels) if freeze.channels is not None else None,
        "tools": list(freeze.tools) if freeze.tools is not None else None,
        "message": freeze.message,
        "started_by": freeze.started_by,
    }


async def _ended(ctx: RunContext, now: datetime) -> list[ActiveFreeze]:
    ended = ctx.policy.ended_freezes(now)
    for row in await ctx.store.ad_hoc_freezes(ending_after=now - _ENDED_LOOKBACK):
        if row.ends_at <= now:
            ended.append(_ad_hoc(row))
    return ended


async def tick(ctx: RunContext, redraw: RedrawPending) -> int:
    """Announce and audit each freeze window's start and end once (across replicas), and
    redraw the pending cards it covers; returns how many announcements this call claimed."""
    now = ctx.clock()
    claimed = 0
    for freeze in await active_freezes(ctx, now):
        key = f"{freeze.window_key}:started"
        if await ctx.store.claim_freeze_notice(key, "freeze_started", details=_details(freeze)):
            claimed += 1
            await _announce(ctx, freeze, started=True)
            await redraw(freeze)
    for freeze in await _ended(ctx, now):
        key, began = f"{freeze.window_key}:ended", f"{freeze.window_key}:started"
        details = {**_details(freeze), "ended_at": now.isoformat()}
        if await ctx.store.claim_freeze_notice(key, "freeze_ended", details=details, after=began):
            claimed += 1
            await _announce(ctx, freeze, started=False)
            await redraw(freeze)
    return claimed


async def _announce(ctx: RunContext, freeze: ActiveFreeze, *, started: bool) -> None:
    notice = FreezeAnnounced(freeze.label, freeze.until, started, freeze.message, freeze.started_by)
    for channel in _channels(ctx, freeze):
        # A thread_ts of "" posts at the channel's top level.
        await ctx.output.say(Thread("", channel, ""), notice)


class RedrawPending:
    """Redraw the pending cards a freeze covers (`Cards.refresh` of each)."""

    def __init__(self, ctx: RunContext, refresh: Refresh) -> None:
        self.ctx = ctx
        self.refresh = refresh

    async def __call__(self, freeze: ActiveFreeze) -> None:
        for pending in await self.ctx.store.pending_approvals():
            row = pending.call
            if row.needs_approval and freeze.covers(pending.session.channel_id, row.tool):
                try:
                    await self.refresh(row)
                except Exception:  # one card Slack refuses must not stop the others
                    logger.exception("could not redraw the card of %s", row.id)
