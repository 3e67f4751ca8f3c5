"""Edit before approving, and "Allow for <duration>": two ways to approve a gated call.

An edit approves a new call (docs/architecture.md): the ledger keeps the model's arguments and
the edited ones, the card shows the edited arguments and digest, approvals given to the old
arguments do not count, and the model's tool message says a human changed the arguments. The
editor must be allowed to approve (the requester is not). An "Allow for" click approves the call
and, once the approval is final, creates an allowance (`bot.runs.edits`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

from agent_core import ApprovalGate, Tool, ToolCall, call_digest, canonical_arguments

from ..allowances import (
    ArgvShape,
    Shape,
    covers,
    dump_shape,
    examples_for,
    load_shape,
    shape_of,
)
from ..store import (
    AllowanceGrant,
    AllowanceRow,
    EditNotAllowed,
    NoAllowanceOffered,
    Ruling,
    SelfAllow,
    SessionRow,
    ToolCallRow,
    already_reason,
)
from ..words import format_duration
from .cards import Cards, allow_choices, allow_window
from .context import RunContext, judge_in_shadow, thread_of
from .freezes import freeze_for
from .gate import audit_refusal, authorize_on, call_decision, on_call, refusal_notice, ruling
from .metrics import note_decision
from .notices import (
    AllowanceGranted,
    AllowanceRevoked,
    AllowanceUsed,
    DecisionNotRecorded,
    EditAwaitsPreview,
    NotApprovable,
    NotEditable,
    NothingRevoked,
    Notice,
    UnknownRequest,
)
from .output import Thread
from .previews import ensure_preview
from .timeline import AllowanceUses
from .views import (
    ARGUMENTS_FIELD,
    COMMAND_FIELD,
    COMMAND_TOOL,
    EDIT_FIELDS_MAX,
    EDIT_TEXT_MAX,
    AllowanceInfo,
    AllowChoice,
    AllowForm,
    EditErrors,
    EditForm,
    edit_form,
    json_arguments,
    parse_form,
)

__all__ = [
    "ARGUMENTS_FIELD",
    "COMMAND_FIELD",
    "EDIT_FIELDS_MAX",
    "EDIT_TEXT_MAX",
    "Allowances",
    "Edits",
    "info",
]


_DECISION = {"edit": "edited", "allow": "allowed"}
"""The audit's word for each action (as before the one gate)."""

Decide = Callable[..., Awaitable[Notice | None]]


class Edits:
    def __init__(
        self,
        ctx: RunContext,
        cards: Cards,
        allowances: Allowances,
        decide: Decide,
        resume: Callable[[str], Awaitable[bool]],
    ) -> None:
        self.ctx = ctx
        self.cards = cards
        self.allowances = allowances
        self._decide = decide
        self._resume = resume

    async def _pending(
        self, ledger_id: str, *, user: str, team: str | None, action: Literal["edit", "allow"]
    ) -> tuple[ToolCallRow, SessionRow] | Notice:
        """The call and its session if `user` may approve it now; else what to tell them."""
        on = await on_call(self.ctx, ledger_id)
        if on is None:
            return UnknownRequest()
        row = on.row
        if row.status != "pending" or not row.needs_approval:
            return DecisionNotRecorded(already_reason(row))
        verdict = await on.authorize(self.ctx, action, user=user, team=team)
        if verdict.kind == "refused":
            await audit_refusal(
                self.ctx,
                on,
                user=user,
                team=team,
                reason=verdict.reason,
                rule=verdict.rule,
                decision=_DECISION[action],
            )
            return refusal_notice(verdict, row, on.decision)
        return row, on.session

    # -- edit ------------------------------------------------------------------------------------

    async def form(self, ledger_id: str, *, user: str, team: str | None) -> EditForm | Notice:
        """The prefilled edit form, or why `user` may not edit the call."""
        found = await self._pending(ledger_id, user=user, team=team, action="edit")
        if not isinstance(found, tuple):
            return found
        row, _ = found
        if not self.ctx.policy.tool_policy(row.tool).allow_edit:
            return DecisionNotRecorded(EditNotAllowed(row.tool))
        arguments = row.running_arguments()
        arguments = arguments if isinstance(arguments, dict) else {}
        form = edit_form(row, self._tool(row), arguments)
        for field in form.fields:
            if len(field.value) > EDIT_TEXT_MAX:
                return NotEditable(row.tool, field.name, len(field.value), EDIT_TEXT_MAX)
        return form

    async def submit(
        self, ledger_id: str, values: Mapping[str, str | None], *, user: str, team: str | None
    ) -> EditErrors | Notice | None:
        """Approve the call with the submitted arguments. `EditErrors` when they do not fit
        the tool's schema (nothing recorded); a notice for `user` alone when nothing changed."""
        found = await self._pending(ledger_id, user=user, team=team, action="edit")
        if not isinstance(found, tuple):
            return found
        row, session = found
        if not self.ctx.policy.tool_policy(row.tool).allow_edit:
            return DecisionNotRecorded(EditNotAllowed(row.tool))
        current = row.running_arguments()
        current = current if isinstance(current, dict) else {}
        tool = self._tool(row)
        if ARGUMENTS_FIELD in values and len(values) == 1 and row.tool != COMMAND_TOOL:
            parsed = json_arguments(tool, values[ARGUMENTS_FIELD])
        else:
            parsed = parse_form(tool, row.tool, current, values)
        if isinstance(parsed, EditErrors):
            return parsed
        if canonical_arguments(parsed) == canonical_arguments(current):
            return await self._decide(ledger_id, "approved", user=user, team=team)
        # The edited call is judged as it will run: forbidden stays forbidden, and a stricter
        # rule's approvers and quorum apply to it.
        edited = row.model_copy(update={"edited_arguments": canonical_arguments(parsed)})
        decision = call_decision(self.ctx, edited)
        if decision.forbidden:
            return NotApprovable("forbidden")
        verdict = await authorize_on(
            self.ctx, "edit", user=user, team=team, session=session, row=edited, decision=decision
        )
        if verdict.kind == "refused":
            return refusal_notice(verdict, edited, decision)
        # A call whose edited form has a preview is approved on the card that shows that
        # preview: the edit counts no approval, even one that would complete the quorum
        # (Approve binds to a preview someone saw).
        previewed = decision.preview is not None
        outcome = await self.ctx.store.edit_call(
            ledger_id,
            canonical_arguments(parsed),
            call_digest(row.tool, parsed),
            user_id=user,
            team_id=team,
            ruling=ruling(self.ctx, session.channel_id, decision, verdict.rule),
            approve=not previewed,
            counts_for=verdict.counts or None,
        )
        if outcome.recorded and outcome.row.status == "approved":
            note_decision(self.ctx, outcome.row, "edited")
        # The edited call's own preview, for the approvals still to come (the edit and the
        # preview each wrote the card's redraw with them).
        await ensure_preview(self.ctx, outcome.row, decision)
        await self._resume(row.session_id)
        if not outcome.recorded:
            return DecisionNotRecorded(outcome.why or already_reason(outcome.row))
        return EditAwaitsPreview(row.tool) if previewed else None

    def _tool(self, row: ToolCallRow) -> Tool | None:
        return self.ctx.tools.get(row.tool)

    # -- allow -----------------------------------------------------------------------------------

    async def allow_form(
        self, ledger_id: str, *, user: str, team: str | None
    ) -> AllowForm | Notice | None:
        """The Allow dialog when the granter has shapes to choose from; None when the click
        allows at once (one shape, or the rule's `allow_prefix`); else why `user` may not."""
        found = await self._pending(ledger_id, user=user, team=team, action="allow")
        if not isinstance(found, tuple):
            return found
        row, session = found
        if row.requested_by == user:
            return DecisionNotRecorded(SelfAllow())
        return self.allowances.form(row, session.channel_id)

    async def allow(
        self,
        ledger_id: str,
        *,
        user: str,
        team: str | None,
        digest: str | None = None,
        choice: int | None = None,
    ) -> Notice | None:
        """Approve the call and allow its shape in the channel for the policy's `allow_for`,
        in one store transaction. `digest` is what the clicked card (or the dialog) showed
        (None: unknown); `choice` the dialog's pick among the offered shapes."""
        found = await self._pending(ledger_id, user=user, team=team, action="allow")
        if not isinstance(found, tuple):
            return found
        row, session = found
        if row.requested_by == user:
            return DecisionNotRecorded(SelfAllow())
        if not self.allowances.offered(row, session.channel_id):
            return DecisionNotRecorded(NoAllowanceOffered(row.tool))
        # The allowance's shape is read from `row`; binding the approval to `row`'s digest
        # means an edit committed since makes the store refuse rather than allow a stale shape.
        decision = call_decision(self.ctx, row)
        ruled = Ruling(
            rule="allow_for", policy_rule=decision.policy_rule, policy_match=decision.rule_label
        )
        if digest is not None and digest != row.running_digest:
            outcome = await self.ctx.store.decide(
                ledger_id,
                "approved",
                user_id=user,
                team_id=team,
                ruling=ruled,
                digest=digest,
            )
        else:
            grant = self.allowances.grant_for(row, session, choice)
            allowed = await self.ctx.store.allow_call(
                ledger_id,
                grant,
                user_id=user,
                team_id=team,
                reason=f"approved and allowed: {grant.label}",
                ruling=ruled,
                digest=row.running_digest,
            )
            outcome = allowed.decision
            if allowed.allowance is not None:
                note_decision(self.ctx, outcome.row, "allowed")
                thread = await thread_of(self.ctx, row)
                if thread is not None:
                    await self.ctx.output.say(thread, AllowanceGranted(info(allowed.allowance)))
        await self._resume(row.session_id)
        if not outcome.recorded:
            return DecisionNotRecorded(outcome.why or already_reason(outcome.row))
        return None


# -- allow ---------------------------------------------------------------------------------------
# Allowances in the run service: granting one from a card, the per-run gate that applies them,
# listing and revoking.
#
# An allowance applies only where the policy still offers "Allow for" for the call (`allow_for`
# set, on its rule or its tool) when it needs a single approval, and only to calls the policy
# would otherwise gate: a policy that says `approval = "always"` without `allow_for` is never
# bypassed, and a forbidden call, or one a stricter rule decides, never runs under one
# (`bot.allowances.covers`). Using one claims nothing (two runs may use it at once); each use is
# audited and said in the thread.


logger = logging.getLogger("opsgate.runs")


def info(row: AllowanceRow) -> AllowanceInfo:
    return AllowanceInfo(
        row.id, row.channel_id, row.tool, row.label, row.granted_by, row.expires_at
    )


class Allowances:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.uses = AllowanceUses()
        """The calls the gate let through, for the run's timeline."""

    def offered(self, row: ToolCallRow, channel: str) -> bool:
        """Whether the card of `row` in `channel` offers "Allow for <duration>"."""
        return allow_window(self.ctx, row, channel) is not None

    def choices(self, row: ToolCallRow) -> tuple[Shape, ...]:
        return allow_choices(self.ctx, row)

    def form(self, row: ToolCallRow, channel: str) -> AllowForm | None:
        """The Allow dialog for `row`, or None when a click allows at once."""
        shapes = self.choices(row)
        window = allow_window(self.ctx, row, channel)
        if not shapes or window is None:
            return None
        options = tuple(
            AllowChoice(_choice_label(shape, row.tool), *examples_for(shape)) for shape in shapes
        )
        return AllowForm(row.id, row.tool, row.running_digest, format_duration(window), options)

    def grant_for(
        self, row: ToolCallRow, session: SessionRow, choice: int | None = None
    ) -> AllowanceGrant:
        """The allowance an "Allow for" click on `row` asks for (stored with its approval);
        only for a row `offered` says yes to. `choice`: the dialog's pick among `choices`."""
        decision = call_decision(self.ctx, row)
        window = self.ctx.policy.allow_window(row.tool, session.channel_id, decision)
        arguments = row.running_arguments()
        shape = shape_of(row.tool, arguments if isinstance(arguments, dict) else {}, decision)
        shapes = self.choices(row)
        if choice is not None and 0 <= choice < len(shapes):
            shape = shapes[choice]
        assert window is not None and shape is not None
        return AllowanceGrant(
            channel_id=session.channel_id,
            tool=row.tool,
            shape=dump_shape(shape),
            label=shape.label(row.tool),
            expires_at=self.ctx.clock() + window,
        )

    def gate(self, thread: Thread, session_id: str) -> ApprovalGate:
        """The approval gate of one run in `thread`: the policy's, then the channel's
        allowances for calls it would gate."""
        return _Gate(self, thread, session_id)

    async def active(self, channel: str | None = None) -> list[AllowanceInfo]:
        rows = await self.ctx.store.active_allowances(channel_id=channel, now=self.ctx.clock())
        return [info(r) for r in rows]

    async def revoke(self, allowance_id: str, *, user: str, team: str | None) -> Notice:
        """End an allowance: its granter, or anyone who may approve in its channel, may."""
        store = self.ctx.store
        row = await store.get_allowance(allowance_id)
        if row is None or not row.active(self.ctx.clock()):
            return NothingRevoked("that allowance has already ended")
        if user != row.granted_by:
            call = await store.get_call(row.ledger_id)
            session = None if call is None else await store.get_session(call.session_id)
            verdict = (
                None
                if session is None
                else await authorize_on(
                    self.ctx, "revoke", user=user, team=team, session=session, no_requester=True
                )
            )
            if verdict is None or verdict.kind == "refused":
                return NothingRevoked("only its granter or an approver of its channel may")
        if not await store.revoke_allowance(allowance_id, user_id=user):
            return NothingRevoked("someone revoked it first")
        return AllowanceRevoked(info(row), user)


def _choice_label(shape: Shape, tool: str) -> str:
    """The dialog's words for a shape: `exact: kubectl get pods -n a`, `kubectl get pods …`."""
    if isinstance(shape, ArgvShape):
        words = " ".join(shape.argv)
        return f"{words} …" if shape.prefix else f"exact: {words}"
    return f"exact: {shape.label(tool)}"


class _Gate:
    def __init__(self, owner: Allowances, thread: Thread, session_id: str) -> None:
        self.owner = owner
        self.thread = thread
        self.session_id = session_id

    async def __call__(self, tool: Tool, call: ToolCall) -> bool:
        ctx = self.owner.ctx
        decision = ctx.policy.decide(tool, call)
        channel = self.thread.channel_id
        if ctx.shadow is not None:
            await judge_in_shadow(
                ctx, tool, call, decision, channel=channel, session_id=self.session_id
            )
        if not decision.requires_approval:
            return False
        if decision.forbidden or ctx.policy.allow_window(tool.name, channel, decision) is None:
            return True
        if await freeze_for(ctx, channel, tool.name) is not None:
            return True  # a change freeze: no allowance covers a call (the card says why)
        arguments = call.parsed_arguments()
        for row in await ctx.store.active_allowances(channel_id=channel, now=ctx.clock()):
            shape = load_shape(row.shape)
            if row.tool != tool.name or shape is None:
                continue
            if covers(shape, tool.name, arguments, decision):
                await self._used(row, call)
                return False
        return True

    async def _used(self, row: AllowanceRow, call: ToolCall) -> None:
        ctx = self.owner.ctx
        self.owner.uses.note(call.id, row.granted_by)
        await ctx.store.audit(
            "allowance_used",
            actor=row.granted_by,
            session_id=self.session_id,
            call_id=call.id,
            details={
                "allowance_id": row.id,
                "granted_by": row.granted_by,
                "tool": call.name,
                "arguments": call.parsed_arguments(),
            },
        )
        await ctx.output.say(self.thread, AllowanceUsed(call.name, info(row)))
