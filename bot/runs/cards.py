"""Approval cards: built from ledger rows, posted when a run pauses, redrawn on every change.

A card must never keep buttons for a decided call: every decision redraws its card, a click
on a decided card redraws it, and start-up redraws every card whose drawn state (the ledger's
`card_drawn`) differs from its call's (the process may have died between recording a decision
or a cancel and redrawing).

A card's facts beyond the call (the model's reason, the judged parts, why "Allow for" is
absent) and the redraws drawn in process where there is no Slack sender are here too: both
are what a card shows, and nothing else uses them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, Literal

from agent_core import Tool

from ..allowances import Shape, offered_shapes, shape_of
from ..policy import QUARANTINED, GateDecision, added_by
from ..store import CARD_REDRAW, OutboxRow, Ruling, ToolCallRow, card_state
from ..tools import tool_summary
from ..tools.mcp import McpTool
from ..words import format_duration
from .context import RunContext
from .freezes import with_freeze
from .gate import call_decision, card_requirements
from .notices import (
    CallLink,
    CardNotPosted,
)
from .output import PostFailed, Thread
from .previews import card_preview, ensure_preview
from .views import CardCall, CardDrawing, CardOutcome, CardPart, CardRef, OutsideAsk, ServerTool

__all__ = [
    "CARD_RETRY_DELAYS",
    "REASON_ARGUMENTS",
    "CardRetries",
    "Cards",
    "LocalRedraws",
    "absent_allow",
    "allow_choices",
    "allow_window",
    "audit_gate_rule",
    "card_parts",
    "forbidden_reason",
    "model_reason",
    "scope",
    "server_tool",
]


logger = logging.getLogger("opsgate.runs")


class Cards:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.retries = CardRetries(ctx, self._adopt_or_post)
        """Background tries for a card Slack refused."""

    def card_call(self, row: ToolCallRow, batch: list[ToolCallRow], channel: str) -> CardCall:
        tool = self.ctx.tools.get(row.tool)
        decision = call_decision(self.ctx, row)
        window = allow_window(self.ctx, row, channel)
        approvers = self.ctx.policy.approvers_for(channel, decision)
        return CardCall(
            ledger_id=row.id,
            tool=row.tool,
            # For the people deciding: a line about the tool, not the text for the model.
            description=tool_summary(tool) if tool else "",
            arguments=row.running_arguments(),
            digest=row.running_digest,
            requested_by=row.requested_by,
            call_id=row.call_id,
            held=tuple((r.tool, r.arguments_value()) for r in batch if not r.needs_approval),
            required_approvals=self.ctx.policy.required_approvals_for(channel, decision),
            approvals=tuple(row.approvals),
            server_tool=server_tool(tool),
            edited_by=row.edited_by,
            original_arguments=row.arguments_value() if row.edited_arguments else None,
            can_edit=self.ctx.policy.tool_policy(row.tool).allow_edit,
            allow_for=None if window is None else format_duration(window),
            allow_scope=scope(row, decision) if window is not None else "",
            allow_dialog=window is not None and bool(allow_choices(self.ctx, row)),
            locked="forbidden" if decision.forbidden else row.card_locked,
            expires_at=row.expires_at,
            approver_users=approvers.users,
            approver_groups=approvers.groups,
            escalated_to=escalated_to(self.ctx, row, decision),
            asked_at=row.created_at,
            policy_rule=decision.rule if decision.policy_rule is not None else None,
            justification=decision.justification,
            preview=card_preview(row, decision),
            requirements=card_requirements(self.ctx, row, channel, decision),
            parts=card_parts(decision),
            no_allow=absent_allow(self.ctx, row, channel, decision, window is not None),
        )

    async def card_with_reason(
        self, row: ToolCallRow, batch: list[ToolCallRow], channel: str
    ) -> CardCall:
        """`card_call` with the model's stated reason for the call (read from its turn)."""
        card = self.card_call(row, batch, channel)
        reason = await model_reason(self.ctx, row, self.ctx.tools.get(row.tool))
        return replace(card, model_reason=reason)

    async def _asked(self, card: CardCall, row: ToolCallRow) -> CardCall:
        """An outside request's card says who asked, and that OpsGate will not run it."""
        ask = await self.ctx.store.plane_of_session(row.session_id)
        if ask is None:
            return card
        return dataclasses.replace(card, outside=OutsideAsk(ask.client, ask.reason))

    async def link(self, row: ToolCallRow) -> CallLink:
        ref = _ref(row)
        return CallLink(row.tool, None if ref is None else await self.ctx.output.permalink(ref))

    async def post_all(self, thread: Thread, session_id: str) -> bool:
        """The paused batch's cards, each with its deadline set first (the deciding rule's
        `ttl`, else the default). A forbidden call's card has no Approve and the call is
        rejected at once with the rule's justification; True when that happened (the batch
        may be complete: the caller resumes it once this run has ended)."""
        store = self.ctx.store
        batch = await store.batch_calls(session_id)
        refused = False
        for row in batch:
            if not row.needs_approval or row.card_ts is not None:
                continue
            decision = call_decision(self.ctx, row)
            if row.expires_at is None:
                expires_at = self.ctx.clock() + self.ctx.policy.ttl_for(decision)
                await store.set_expiry(row.id, expires_at)
                await audit_gate_rule(self.ctx, row)
                row = row.model_copy(update={"expires_at": expires_at})
                self.ctx.deadline_set()
            await self.post(thread, row, batch)
            if decision.forbidden and row.status == "pending":
                outcome = await store.decide(
                    row.id,
                    "rejected",
                    user_id="",
                    reason=forbidden_reason(decision),
                    ruling=Ruling(rule="policy: forbidden", policy_rule=decision.policy_rule),
                )
                refused = refused or outcome.recorded
        return refused

    async def post(
        self, thread: Thread, row: ToolCallRow, batch: list[ToolCallRow], *, adopt: bool = False
    ) -> None:
        """Post one card. If that fails, say so in the thread and try again in the background
        (`CardRetries` below): the call still expires on time, `cancel` still works, and the
        next start-up tries again too. `adopt`: a card may already be in the thread (see
        `_adopt_or_post`)."""
        post = self._adopt_or_post if adopt else self._post_once
        # The deciding rule's preview runs before the card is posted.
        row = await ensure_preview(self.ctx, row, call_decision(self.ctx, row))
        error = await post(thread, row, batch)
        if error is not None:
            await self.ctx.output.say(thread, CardNotPosted(row.tool, error))
            self.retries.start(thread, row, error)

    async def _post_once(
        self, thread: Thread, row: ToolCallRow, batch: list[ToolCallRow]
    ) -> str | None:
        card = await self._asked(await self.card_with_reason(row, batch, thread.channel_id), row)
        card = await with_freeze(
            self.ctx, card, row, thread.channel_id, call_decision(self.ctx, row)
        )
        posted = await self.ctx.output.post_card(thread, card)
        match posted:
            case PostFailed(error=error):
                logger.error("could not post the card for %s: %s", row.id, error)
                return error
            case CardRef(channel_id=channel, ts=ts, locked=locked):
                await self.ctx.store.set_card(row.id, channel, ts, locked=locked)
                await self.ctx.store.card_drawn(row.id, card_state(row))
        return None

    async def _adopt_or_post(
        self, thread: Thread, row: ToolCallRow, batch: list[ToolCallRow]
    ) -> str | None:
        """Post a card that an earlier try may have posted already (a kill -9 or a timeout
        while Slack answered): a card of this call found in the thread is adopted, stored
        and redrawn as the call's current state, instead of a second card being posted."""
        found = await self.ctx.output.find_card(thread, row.id)
        if found is None:
            return await self._post_once(thread, row, batch)
        logger.info("adopting the card already posted for %s", row.id)
        await self.ctx.store.set_card(row.id, found.channel_id, found.ts, locked=found.locked)
        adopted = await self.ctx.store.get_call(row.id)
        if adopted is not None:
            await self.refresh(adopted)
        return None

    async def refresh(self, row: ToolCallRow) -> None:
        """Redraw a card no change asked for: a click on a decided card, a freeze that began
        or ended, start-up's stale cards. (A change the store records writes its card's redraw
        in its own transaction; the front end's outbox sender draws it with `drawing`.)"""
        drawing = await self._drawing(row)
        if drawing is None:
            return
        if await self.ctx.output.update_card(drawing.ref, drawing.card, drawing.outcome) is None:
            await self.ctx.store.card_drawn(row.id, drawing.state)

    async def drawing(self, ledger_id: str) -> CardDrawing | None:
        """Call `ledger_id`'s card as its state says it should look now (None: no card, or
        no such call): what the outbox sends for a redraw it owes."""
        row = await self.ctx.store.get_call(ledger_id)
        return None if row is None else await self._drawing(row)

    async def _drawing(self, row: ToolCallRow) -> CardDrawing | None:
        ref = _ref(row)
        if ref is None:
            return None
        batch = await self.ctx.store.batch_calls(row.session_id)
        card = await self._asked(await self.card_with_reason(row, batch, ref.channel_id), row)
        card = await with_freeze(self.ctx, card, row, ref.channel_id, call_decision(self.ctx, row))
        outcome = None
        if row.status != "pending":
            status = _card_status(row.status)
            outcome = CardOutcome(
                status=status,
                decided_by=row.decided_by,
                decided_at=row.decided_at or self.ctx.clock(),
                # "cancelled by <@U>" is what the card says already; the reason would repeat it.
                reason=None if status == "cancelled" else row.reason,
                ran=row.status == "done",
                ended=_first_line(row.result) if row.status == "done" else None,
                failed=row.status == "done" and bool(row.is_error),
            )
        return CardDrawing(ref, card, outcome, card_state(row))

    async def repost_missing(self) -> None:
        """A card whose post failed (or that a crash kept from being posted) gets another try,
        so every waiting call has its buttons."""
        for pending in await self.ctx.store.pending_approvals():
            if pending.call.card_ts is not None:
                continue
            session = pending.session
            thread = Thread.of(session)
            batch = await self.ctx.store.batch_calls(session.id)
            row = pending.call
            if row.expires_at is None:
                ttl = self.ctx.policy.ttl_for(call_decision(self.ctx, row))
                expires_at = self.ctx.clock() + ttl
                await self.ctx.store.set_expiry(row.id, expires_at)
                row = row.model_copy(update={"expires_at": expires_at})
                self.ctx.deadline_set()
            await self.post(thread, row, batch, adopt=True)

    async def redraw_batch(self, session_id: str) -> None:
        """Redraw every posted card of the session's latest batch (after a restart: a decision
        may have been recorded without its card being redrawn)."""
        for row in await self.ctx.store.batch_calls(session_id):
            if row.needs_approval:
                await self.refresh(row)

    async def redraw_stale(self) -> int:
        """Redraw every card that shows another state than its call's (see `card_state`): a
        crash between recording a decision or a cancel and the redraw leaves live buttons."""
        stale = await self.ctx.store.stale_cards()
        for row in stale:
            await self.refresh(row)
        return len(stale)


def _ref(row: ToolCallRow) -> CardRef | None:
    if not (row.card_channel and row.card_ts):
        return None
    return CardRef(row.card_channel, row.card_ts)


def _first_line(result: str | None) -> str | None:
    """The first non-blank line of a call's result: how it ended ("exit code: 0")."""
    for line in (result or "").splitlines():
        if line.strip():
            return line.strip()
    return None


def _card_status(status: str) -> Literal["approved", "rejected", "expired", "cancelled"]:
    match status:
        case "rejected" | "expired" | "cancelled":
            return status
        case _:
            return "approved"


# -- card_retry ----------------------------------------------------------------------------------
# Another try for a card Slack refused (rate limited past slack_sdk's retries, a 5xx, a
# timeout), while the bot runs: a few tries over about a minute, in an owned background task.
# The thread was told at the first failure; it is told again if the last try fails too (then the
# next start-up tries once more). A call decided, cancelled or expired meanwhile is not posted.


CARD_RETRY_DELAYS: tuple[float, ...] = (5.0, 15.0, 40.0)
"""Seconds before each further try (after the first failure)."""

PostOnce = Callable[[Thread, ToolCallRow, list[ToolCallRow]], Awaitable[str | None]]
"""Post one card; the error when it failed, else None."""


class CardRetries:
    def __init__(self, ctx: RunContext, post_once: PostOnce) -> None:
        self.ctx = ctx
        self._post_once = post_once
        self.delays = CARD_RETRY_DELAYS
        """Tests shorten them."""

    def start(self, thread: Thread, row: ToolCallRow, error: str) -> None:
        """Try again in the background (nothing when shutting down: the next start-up does)."""
        if self.ctx.tasks.closed or not self.delays:
            return
        self.ctx.tasks.spawn(
            self._retry(thread, row.id, row.tool, error), name=f"card retry {row.id}", service=True
        )

    async def _retry(self, thread: Thread, ledger_id: str, tool: str, error: str) -> None:
        store = self.ctx.store
        for delay in self.delays:
            await asyncio.sleep(delay)
            row = await store.get_call(ledger_id)
            if row is None or row.status != "pending" or row.card_ts is not None:
                return
            failed = await self._post_once(thread, row, await store.batch_calls(row.session_id))
            if failed is None:
                logger.info("the card for %s was posted on a later try", ledger_id)
                return
            error = failed
        logger.error("gave up posting the card for %s: %s", ledger_id, error)
        await self.ctx.output.say(thread, CardNotPosted(tool, error, gave_up=True))


# -- gate_audit ----------------------------------------------------------------------------------
# The policy's verdict on a stored call, and the audit row that says which rule gated it.
#
# The store audits the request itself ("request"); the rule comes from the policy, which the
# store does not know, so the run service adds it when it posts the call's card. The verdict
# (`GateDecision`) is worked out again from the stored call wherever it is needed (card,
# approvals, allowances): it depends only on the policy and the arguments that would run.


def escalated_to(ctx: RunContext, row: ToolCallRow, decision: GateDecision) -> tuple[str, ...]:
    """Who the escalation steps passed so far added (on-call entries resolved now)."""
    now = ctx.clock()
    steps = range(1, row.escalation_step + 1)
    return tuple(dict.fromkeys(a for s in steps for a in added_by(ctx.policy, decision, s, now)))


def forbidden_reason(decision: GateDecision) -> str:
    """What the model (and the card) is told of a forbidden call: the rule and its reason."""
    where = decision.policy_rule or decision.rule
    why = decision.justification or "the policy forbids this call"
    return f"Forbidden by the policy ({where}): {why}. It was not run and cannot be approved."


async def audit_gate_rule(ctx: RunContext, row: ToolCallRow) -> None:
    """Audit "gate" for a gated call: the tool, the server (for an MCP tool) and the rule."""
    decision = call_decision(ctx, row)
    await ctx.store.audit(
        "gate",
        actor=row.requested_by,
        session_id=row.session_id,
        call_id=row.call_id,
        details={
            "ledger_id": row.id,
            "tool": row.tool,
            "rule": decision.rule,
            "policy_rule": decision.policy_rule,
            "tier": decision.tier,
        },
    )


# -- server_tool ---------------------------------------------------------------------------------
# What a card says about an MCP server's tool: the server, the tool and its annotations.


def server_tool(tool: Tool | None) -> ServerTool | None:
    """The card's facts about `tool` when it is an MCP server's tool, else None."""
    if not isinstance(tool, McpTool):
        return None
    hints = tool.annotations
    return ServerTool(
        server=tool.server,
        tool=tool.tool,
        title=hints.title,
        labels=((QUARANTINED,) if tool.quarantined else ()) + hints.labels(),
        destructive=hints.destructive is True and hints.read_only is not True,
    )


def allow_window(ctx: RunContext, row: ToolCallRow, channel: str) -> timedelta | None:
    """How long an allowance from the card of `row` in `channel` lasts; None when the card
    offers no "Allow for" (no `allow_for`, more than one approval needed, a forbidden call, or
    one no allowance may cover: compound, redirected, substituted, wrapped)."""
    decision = call_decision(ctx, row)
    window = ctx.policy.allow_window(row.tool, channel, decision)
    arguments = row.running_arguments()
    if window is None or not isinstance(arguments, dict):
        return None
    return window if shape_of(row.tool, arguments, decision) is not None else None


def allow_choices(ctx: RunContext, row: ToolCallRow) -> tuple[Shape, ...]:
    """The shapes the granter chooses from in the Allow dialog; empty when there is no choice
    to make (one shape, or the deciding rule declares its `allow_prefix`)."""
    decision = call_decision(ctx, row)
    arguments = row.running_arguments()
    if decision.allow_prefix is not None or not isinstance(arguments, dict):
        return ()
    shapes = offered_shapes(row.tool, arguments, decision)
    return shapes if len(shapes) > 1 else ()


def scope(row: ToolCallRow, decision: GateDecision | None = None) -> str:
    """The call shape an allowance granted on `row` covers, in words."""
    arguments = row.running_arguments()
    if not isinstance(arguments, dict):
        return ""
    shape = shape_of(row.tool, arguments, decision)
    return "" if shape is None else shape.label(row.tool)


# -- what a card says beyond the call ---------------------------------------------------------
# What a card tells the person deciding, beyond the call itself: the model's stated reason
# for the call, which parts of a command the policy judged and why, and why "Allow for" is
# absent when it is.
#
# All of it is plain data for `CardCall`; the renderers escape what is untrusted (the model's
# words, the command's text).


REASON_ARGUMENTS = ("reason", "justification")
"""Arguments a tool's schema may declare for the model to say why it calls it."""

_TIERS = {"never": "runs without approval", "forbidden": "forbidden"}


async def model_reason(ctx: RunContext, row: ToolCallRow, tool: Tool | None) -> str | None:
    """What the model said of the call: a `reason`/`justification` argument the tool's schema
    declares, else the text of the assistant turn that asked for it (None: it said nothing)."""
    arguments = row.running_arguments()
    declared = _declared(tool)
    for name in REASON_ARGUMENTS:
        value = arguments.get(name) if isinstance(arguments, dict) else None
        if name in declared and isinstance(value, str) and value.strip():
            return value.strip()
    message = await ctx.store.message_at(row.session_id, row.message_seq)
    if message is None or message.role != "assistant" or not message.content:
        return None
    return message.content.strip() or None


def _declared(tool: Tool | None) -> frozenset[str]:
    properties: Any = {} if tool is None else tool.parameters.get("properties", {})
    return frozenset(properties) if isinstance(properties, dict) else frozenset()


def card_parts(decision: GateDecision) -> tuple[CardPart, ...]:
    """Each simple command the policy judged, in `policy explain`'s words, and the whole
    command's own reason for a card when it has one (e.g. text that does not parse)."""
    parts = [
        CardPart(p.text, _TIERS.get(p.tier, "needs approval"), p.policy_rule, p.why)
        for p in decision.parts
    ]
    parsed = decision.command
    if parsed is not None:
        whole = parsed.unjudgeable.difference(*(p.flags for p in parsed.parts))
        if whole:
            why = f"{', '.join(sorted(whole))}: approval required"
            parts.append(CardPart("the whole command", "needs approval", None, why))
    return tuple(parts)


def absent_allow(
    ctx: RunContext, row: ToolCallRow, channel: str, decision: GateDecision, offered: bool
) -> str | None:
    """Why the card of `row` offers no "Allow for", in words (the first that holds: forbidden,
    several rules, a preview, a quorum, a call no allowance may cover, no `allow_for`);
    None when it offers one."""
    if offered:
        return None
    if decision.forbidden:
        return "the policy forbids this call"
    own = decision.allow_for or ctx.policy.tool_policy(row.tool).allow_for
    if len(decision.needs()) > 1:
        return "several rules must each approve this call"
    if decision.preview is not None:
        return "its rule shows a preview: an allowed call would run unseen"
    needed = ctx.policy.required_approvals_for(channel, decision)
    if needed != 1:
        return f"it needs {needed} approvals"
    arguments = row.running_arguments()
    if not isinstance(arguments, dict) or shape_of(row.tool, arguments, decision) is None:
        return (
            "no allowance may cover it: an allowance covers one plain command (no pipe, "
            "list, redirection, substitution, expansion or wrapper)"
        )
    if own is None:
        where = decision.policy_rule or f"tools.{row.tool}"
        return f"{where} sets no allow_for"
    return None


# -- redraws drawn in this process ------------------------------------------------------------
# The card redraws the store owes, drawn in this process: the sender of a front end with no
# Slack (the terminal's `opsgate chat`).
#
# Every change a card shows writes the card's redraw (`CARD_REDRAW`, an outbox row) in the
# change's own transaction (`bot.store.outbox`). In Slack the outbox's sender draws and sends
# those rows (`bot.slack.outbox`); without Slack, `LocalRedraws.drain` claims them, draws each
# card from its call's state now (`Cards.refresh`, which records what the card shows) and marks
# the row done. It runs where the front end needs its screen current (before a prompt).


_LEASE = timedelta(seconds=60)
_BATCH = 1000


class LocalRedraws:
    """Draws the redraws owed to `cards`' output. `channel`: only that channel's (a Slack bot
    sharing the database keeps its own: they are left to its sender); None: every card's."""

    def __init__(self, cards: Cards, *, channel: str | None, claimer: str = "local") -> None:
        self.cards = cards
        self.channel = channel
        self.claimer = claimer

    async def drain(self) -> int:
        """Draw every redraw owed now, once each; how many cards were drawn."""
        store = self.cards.ctx.store
        drawn = 0
        for row in await store.claim_outbox(self.claimer, limit=_BATCH, lease=_LEASE):
            if not self._ours(row):
                await store.outbox_later(row.id, self.cards.ctx.clock(), "left to its sender")
                continue
            try:
                call = await store.get_call(str(row.params.get("ledger_id") or ""))
                if call is not None:
                    await self.cards.refresh(call)
                    drawn += 1
                await store.outbox_sent(row.id)
            except Exception:  # a redraw is not worth ending the chat: drawn again later
                logger.exception("could not redraw the card of %s", row.params.get("ledger_id"))
        return drawn

    def _ours(self, row: OutboxRow) -> bool:
        return row.method == CARD_REDRAW and self.channel in (None, row.channel_id)
