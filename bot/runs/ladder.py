"""When nobody answers: each waiting call's escalation steps and reminders, run by the expiry
timer's tick (`RunService.expire_due`).

At each tick every undecided call with a posted card is looked at once: the steps of its
ladder (`bot.policy._oncall`) whose time since the card has come are passed, one by one, each
claimed in the store (once across replicas and restarts) with the direct messages to the
people it adds and its card's redraw; then, if `remind_every` has come round again, each
approver who may still decide gets a reminder. Every call is planned before the first
commit (so the outbox's sender, which wakes on its own every few seconds, does not compete with
the planning; the calls' workspaces are read together, not one call at a time), then the
claims of `CHUNK` calls share one transaction (`Store.claim_all`), a handful of statements
for them all. A forbidden call never escalates; a change freeze over the call holds both.

The expiry timer that runs the tick, and the plain reminder before a card expires, are here
too: the ladder is what the timer climbs, and the timer exists to climb it and expire cards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from ..policy import GateDecision, Ladder, added_by, ladder_for, ladder_tick
from ..store import LadderClaim, OutboxEntry, Quorum, Store, ToolCallRow
from .cards import Cards
from .context import RunContext, thread_of
from .freezes import freeze_for
from .gate import call_decision, lapse, quorums
from .notices import AwaitsYou, Reminder
from .output import Thread

__all__ = [
    "LATE_BY",
    "ExpiryTimer",
    "climb",
    "send_reminders",
    "waiting_for",
]

logger = logging.getLogger("opsgate.runs")

SUMMARY_MAX = 200
"""Characters of a call's arguments a direct message shows (the card has them whole)."""


CHUNK = 250
"""Waiting calls whose steps and reminders are claimed in one transaction (one commit, about
a fifth of a second on a busy 2-CPU VM): fewer would hand the database to the outbox's sender
between them more often and slow the tick, more would keep a click's write waiting longer."""


@dataclass(frozen=True, slots=True)
class _Planned:
    """A claim this tick makes, and what to count once it is made."""

    claim: LadderClaim
    rule: str
    people: int


@dataclass(frozen=True, slots=True)
class _Due:
    """A waiting call some of whose steps, or a reminder round, are due (by its times alone:
    no read of the database or the people yet)."""

    row: ToolCallRow
    decision: GateDecision
    ladder: Ladder
    steps: int
    """How many of its ladder's steps should have passed by now."""
    rounds: int
    """How many reminder rounds should have gone out by now."""


async def climb(ctx: RunContext, cards: Cards) -> list[ToolCallRow]:
    """Pass the escalation steps and send the reminders due now; returns the calls a step
    approved (its lowered quorum met by the approvals already given: their runs resume)."""
    now = ctx.clock()
    await lapse(ctx)  # delegations end by themselves
    if ladder_tick(ctx.policy, math.inf) == math.inf:
        return []  # no reminders or steps anywhere in the file: nothing to look at
    due: list[_Due] = []
    for row in await ctx.store.waiting_calls():
        try:
            due += [d] if (d := _due(ctx, row, now)) is not None else []
        except Exception:
            logger.exception("judging call %s for its ladder failed", row.id)
    # Every call is planned before the first commit, its workspace read with the others'.
    sessions = await ctx.store.sessions_of([d.row.session_id for d in due])
    frozen: dict[tuple[str, str], bool] = {}
    per_call: list[list[_Planned]] = []
    for d in due:
        session = sessions.get(d.row.session_id)
        team = Thread.of(session).team_id if session is not None else ""
        try:
            if planned := await _plan(ctx, cards, d, team, now, frozen):
                per_call.append(planned)
        except Exception:
            logger.exception("escalating or reminding about call %s failed", d.row.id)
    return await _claim(ctx, per_call)


async def _claim(ctx: RunContext, per_call: list[list[_Planned]]) -> list[ToolCallRow]:
    """Make the planned claims, `CHUNK` calls' to a transaction; the calls they approved."""
    approved: list[ToolCallRow] = []
    for first in range(0, len(per_call), CHUNK):
        chunk = [plan for planned in per_call[first : first + CHUNK] for plan in planned]
        try:
            last = first + CHUNK >= len(per_call)  # the sender is woken once, at the end
            made = await ctx.store.claim_all([p.claim for p in chunk], wake=last)
        except Exception:
            logger.exception("claiming %d ladder steps and reminders failed", len(chunk))
            continue
        for plan, done in zip(chunk, made, strict=True):
            if not done.made:
                continue
            approved += [done.approved] if done.approved is not None else []
            if plan.claim.column == "escalation_step":
                ctx.observer.escalated(plan.rule, plan.claim.value)
            elif plan.people:
                ctx.observer.reminded(plan.people)
    return approved


def _due(ctx: RunContext, row: ToolCallRow, now: datetime) -> _Due | None:
    """`row`'s steps and rounds due by now, if any is not yet passed or sent (the common
    case, nothing due, costs no read). A forbidden call never escalates."""
    decision = call_decision(ctx, row)
    if decision.forbidden or not decision.needs():
        return None
    ladder = ladder_for(ctx.policy, decision)
    steps = sum(1 for step in ladder.steps if row.created_at + step.after <= now)
    rounds = _rounds_due(row, ladder, now)
    if steps <= row.escalation_step and rounds <= row.reminders_sent:
        return None
    return _Due(row, decision, ladder, steps, rounds)


async def _plan(
    ctx: RunContext,
    cards: Cards,
    due: _Due,
    team: str,
    now: datetime,
    frozen: dict[tuple[str, str], bool],
) -> list[_Planned]:
    """The steps and the reminder round of a call due now, as claims (none: a freeze holds
    them). `team`: the call's workspace, where its direct messages go."""
    row, decision, ladder = due.row, due.decision, due.ladder
    where = (row.card_channel or "", row.tool)
    if where not in frozen:
        frozen[where] = await freeze_for(ctx, *where) is not None
    if frozen[where]:
        return []  # a freeze holds escalation as it holds approvals
    rule = decision.policy_rule or "defaults"
    call = _Call(ctx, cards, row, team, now)
    planned: list[_Planned] = []
    for step in range(row.escalation_step + 1, due.steps + 1):
        added = added_by(ctx.policy, decision, step, now)
        people = await _people(ctx, added)
        owed = await call.messages(people, "escalated")
        details = {"step": step, "added": list(added)}
        needs = call.needs(step) if ladder.steps[step - 1].required_approvals else ()
        claim = LadderClaim(row, "escalation_step", step - 1, step, details, owed, needs)
        planned.append(_Planned(claim, rule, len(people)))
    if due.rounds > row.reminders_sent:
        stepped = max(due.steps, row.escalation_step)
        people = await waiting_for(ctx, call.at(stepped), call.decision(stepped), now)
        owed = await call.messages(people, "reminder")
        details = {"round": due.rounds, "to": list(people)}
        claim = LadderClaim(row, "reminders_sent", row.reminders_sent, due.rounds, details, owed)
        planned.append(_Planned(claim, rule, len(people)))
    return planned


class _Call:
    """One waiting call as a tick plans it: what several of its claims need is worked out
    once (its decision at a step, the direct message about it)."""

    def __init__(
        self, ctx: RunContext, cards: Cards, row: ToolCallRow, team: str, now: datetime
    ) -> None:
        self._ctx, self._cards, self._row, self._team, self._now = ctx, cards, row, team, now
        self._decisions: dict[int, GateDecision] = {}
        self._notice: AwaitsYou | None = None

    def at(self, step: int) -> ToolCallRow:
        """The call's row as it will be once `step` has passed."""
        return self._row.model_copy(update={"escalation_step": step})

    def decision(self, step: int) -> GateDecision:
        """The call's decision once `step` has passed (its approvers grown, its quorum)."""
        if step not in self._decisions:
            self._decisions[step] = call_decision(self._ctx, self.at(step))
        return self._decisions[step]

    def needs(self, step: int) -> tuple[Quorum, ...]:
        """The call's requirements once `step` has passed (for a step that sets a quorum:
        the store approves the call with the step if the approvals given meet them)."""
        return quorums(self._ctx, self._row.card_channel, self.decision(step))

    async def messages(
        self, people: tuple[str, ...], why: Literal["reminder", "escalated"]
    ) -> list[OutboxEntry]:
        """The direct messages about the call to `people` in its workspace, as outbox rows
        (empty without an outbox: nothing is then sent, and the claim still counts)."""
        if not people:
            return []
        if self._notice is None:  # the card's link and the summary, found once
            row = self._row
            link, waited = await self._cards.link(row), self._now - row.created_at
            self._notice = AwaitsYou(link, _summary(row), row.requested_by, waited, why)
        notice = replace(self._notice, why=why)
        owed: list[OutboxEntry] = []
        for person in people:
            owed += self._ctx.output.owed(Thread(self._team, person, ""), notice)
        return owed


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


def _summary(row: ToolCallRow) -> str:
    arguments = row.running_arguments()
    if isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
        text = str(arguments["command"])
    else:
        text = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 1] + "…"


# -- the expiry timer and reminders -----------------------------------------------------------
# The expiry timer: wakes at the earliest deadline (a card's expiry, or its reminder), not on a
# fixed poll, so a card expires within about a second of its time.
#
# It also wakes when a new deadline is set (`poke`), and at least every `longest` seconds: a
# card posted by another replica sharing the database is seen that way. What it runs each time
# (`RunService.expire_due`) claims every reminder and expiry in the store, so replicas whose timers
# fire together still act once.


LATE_BY: Final = 0.05
"""Seconds added to each wait, so the timer never wakes a hair before the deadline (the loop's
clock and the wall clock drift apart a little) and then sleeps a whole round."""

Wait = Callable[[float, asyncio.Event], Awaitable[None]]
"""Sleep up to `seconds` or until the event is set (tests replace it to move a fake clock)."""


async def _wait(seconds: float, wake: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.wait(), seconds)


class ExpiryTimer:
    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], datetime],
        remind_before: timedelta | None,
        longest: float = 15.0,
        wait: Wait = _wait,
    ) -> None:
        self.store = store
        self.clock = clock
        self.remind_before = remind_before
        self.longest = longest
        self._wait = wait
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """A deadline was set: look again now (it may be earlier than the one waited for)."""
        self._wake.set()

    async def next_delay(self) -> float:
        """Seconds until the next expiry or reminder is due (at most `longest`)."""
        due = await self.store.next_expiry()
        if due is None:
            return self.longest
        now = self.clock()
        moments = [due]
        if self.remind_before is not None and due - self.remind_before > now:
            moments.append(due - self.remind_before)
        seconds = min(m - now for m in moments).total_seconds()
        return max(0.0, min(self.longest, seconds + LATE_BY))

    async def run(self, tick: Callable[[], Awaitable[Any]]) -> None:
        """Run `tick` at each deadline, until cancelled (the task's owner does that)."""
        while True:
            self._wake.clear()  # a poke during the tick makes the next wait return at once
            delay = self.longest
            try:
                await tick()
                delay = await self.next_delay()
            except Exception:
                logger.exception("expiring approvals failed")
            await self._wait(delay, self._wake)


# -- reminders -----------------------------------------------------------------------------------
# Reminders before approvals expire: one notice per thread batch, naming every call in it.
#
# A batch's cards share one deadline, so they come due together; a 30-call batch gets one
# reminder, not 30. `Store.due_reminders` marks each call reminded once across all stores.


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
        thread = await thread_of(ctx, rows[0])
        if thread is None:
            continue
        links = tuple([await cards.link(row) for row in rows])
        expires_at = min(row.expires_at for row in rows if row.expires_at is not None)
        await ctx.output.say(thread, Reminder(links, expires_at))
        posted += 1
    return posted
