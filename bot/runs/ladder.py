"""When nobody answers: each waiting call's escalation steps and reminders, run by the expiry
timer's tick (`RunService.expire_due`).

At each tick every undecided call with a posted card is looked at once: the steps of its
ladder (`bot.policy._ladder`) whose time since the card has come are passed, one by one, each
claimed in the store (`Store.claim_escalation`: once across replicas and restarts) with the
direct messages to the people it adds and its card's redraw; then, if `remind_every` has come
round again, each approver who may still decide gets a reminder (`Store.claim_reminder`). A
forbidden call never escalates; a change freeze over the call holds both.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime
from typing import Literal

from ..policy import GateDecision, Ladder, added_by, ladder_for, ladder_tick
from ..store import OutboxEntry, ToolCallRow
from .cards import Cards, call_decision
from .context import RunContext, thread_of
from .delegation import lapse
from .freezes import freeze_for
from .notices import AwaitsYou
from .output import Thread

__all__ = ["climb", "waiting_for"]

logger = logging.getLogger("opsgate.runs")

SUMMARY_MAX = 200
"""Characters of a call's arguments a direct message shows (the card has them whole)."""


async def climb(ctx: RunContext, cards: Cards) -> int:
    """Pass the escalation steps and send the reminders due now; returns the messages sent."""
    sent = 0
    now = ctx.clock()
    await lapse(ctx)  # delegations end by themselves
    if ladder_tick(ctx.policy, math.inf) == math.inf:
        return 0  # no reminders or steps anywhere in the file: nothing to look at
    for row in await ctx.store.waiting_calls():
        try:
            sent += await _one(ctx, cards, row, now)
        except Exception:
            logger.exception("escalating or reminding about call %s failed", row.id)
    return sent


async def _one(ctx: RunContext, cards: Cards, row: ToolCallRow, now: datetime) -> int:
    decision = call_decision(ctx, row)
    if decision.forbidden or not decision.needs():
        return 0
    ladder = ladder_for(ctx.policy, decision)
    due = sum(1 for step in ladder.steps if row.created_at + step.after <= now)
    if due <= row.escalation_step and _rounds_due(row, ladder, now) <= row.reminders_sent:
        return 0  # the common case: nothing due, no database read
    if await freeze_for(ctx, row.card_channel or "", row.tool) is not None:
        return 0  # a freeze holds escalation as it holds approvals
    sent = 0
    while row.escalation_step < due:
        step = row.escalation_step + 1
        added = added_by(ctx.policy, decision, step, now)
        people = await _people(ctx, added)
        owed = await _messages(ctx, cards, row, people, now, "escalated")
        details = {"step": step, "added": list(added)}
        if await ctx.store.claim_escalation(row, step, details, owed):
            ctx.observer.escalated(decision.policy_rule or "defaults", step)
            sent += len(people)
        fresh = await ctx.store.get_call(row.id)
        if fresh is None or fresh.status != "pending":
            return sent
        row = fresh
    return sent + await _remind(ctx, cards, row, ladder, now)


async def _remind(
    ctx: RunContext, cards: Cards, row: ToolCallRow, ladder: Ladder, now: datetime
) -> int:
    due = _rounds_due(row, ladder, now)
    if due <= row.reminders_sent:
        return 0
    people = await waiting_for(ctx, row, call_decision(ctx, row), now)
    owed = await _messages(ctx, cards, row, people, now, "reminder")
    details = {"round": due, "to": list(people)}
    if not await ctx.store.claim_reminder(row, due, details, owed):
        return 0
    if people:
        ctx.observer.reminded(len(people))
    return len(people)


def _rounds_due(row: ToolCallRow, ladder: Ladder, now: datetime) -> int:
    """How many reminder rounds should have gone out by `now` (at most `remind_max`)."""
    if ladder.every is None:
        return 0
    return min(ladder.most, int((now - row.created_at) / ladder.every))


async def waiting_for(
    ctx: RunContext, row: ToolCallRow, decision: GateDecision, now: datetime
) -> tuple[str, ...]:
    """The people who may still decide the call and have not: its approvers now (on-call
    resolved, groups expanded; "anyone in the channel" names nobody to write to), without
    those who approved and without its requester."""
    channel = row.card_channel
    listed: list[str] = []
    for need in decision.needs():
        spec = ctx.policy.approvers_for(channel, decision.under(need), now)
        listed += [*spec.users, *spec.groups]
    people = await _people(ctx, listed)
    decided = {*row.approvals, row.decided_by, row.requested_by}
    return tuple(p for p in people if p not in decided)


async def _people(ctx: RunContext, listed: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """User ids, with each user group's members (a group that cannot be listed is skipped:
    a reminder is a courtesy, never a permission)."""
    out: list[str] = []
    for entry in listed:
        if entry.startswith("S"):
            try:
                out += sorted(await ctx.approvals.groups.members(entry))
            except Exception:
                logger.warning("could not list the members of user group %s", entry)
        elif entry.startswith(("U", "W")):
            out.append(entry)
    return tuple(dict.fromkeys(out))


async def _messages(
    ctx: RunContext,
    cards: Cards,
    row: ToolCallRow,
    people: tuple[str, ...],
    now: datetime,
    why: Literal["reminder", "escalated"],
) -> list[OutboxEntry]:
    """The direct messages to `people` about `row`, as outbox rows (empty without an outbox:
    nothing is then sent, and the claim still counts the round)."""
    if not people:
        return []
    thread = await thread_of(ctx, row)
    team = thread.team_id if thread is not None else ""
    link = await cards.link(row)
    notice = AwaitsYou(link, _summary(row), row.requested_by, now - row.created_at, why)
    owed: list[OutboxEntry] = []
    for person in people:
        owed += ctx.output.owed(Thread(team, person, ""), notice)
    return owed


def _summary(row: ToolCallRow) -> str:
    arguments = row.running_arguments()
    if isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
        text = str(arguments["command"])
    else:
        text = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 1] + "…"
