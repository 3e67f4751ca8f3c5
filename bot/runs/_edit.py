"""Edit before approving, and "Allow for <duration>": two ways to approve a gated call.

An edit approves a new call (docs/architecture.md): the ledger keeps the model's arguments and
the edited ones, the card shows the edited arguments and digest, approvals given to the old
arguments do not count, and the model's tool message says a human changed the arguments. The
editor must be allowed to approve (the requester is not). An "Allow for" click approves the call
and, once the approval is final, creates an allowance (`bot.runs._allow`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import jsonschema

from agent_core import Tool, call_digest, canonical_arguments

from ..store import (
    EditNotAllowed,
    NoAllowanceOffered,
    SelfAllow,
    SessionRow,
    ToolCallRow,
    already_reason,
)
from ._allow import Allowances, info
from ._cards import Cards
from ._context import RunContext
from ._gate_audit import call_decision
from ._observe import note_decision
from .notices import DecisionNotRecorded, NotAllowed, NotApprovable, Notice, UnknownRequest
from .ux import AllowanceGranted, AllowForm, EditErrors, EditField, EditForm

__all__ = ["COMMAND_FIELD", "Edits"]

COMMAND_FIELD = "command"
_COMMAND_TOOL = "run_command"

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
        self, ledger_id: str, *, user: str, team: str | None, action: str
    ) -> tuple[ToolCallRow, SessionRow] | Notice:
        """The call and its session if `user` may approve it now; else what to tell them."""
        store = self.ctx.store
        row = await store.get_call(ledger_id)
        session = None if row is None else await store.get_session(row.session_id)
        if row is None or session is None:
            return UnknownRequest()
        if row.status != "pending" or not row.needs_approval:
            await self.cards.refresh(row)
            return DecisionNotRecorded(already_reason(row))
        verdict = await self.ctx.approvals.check(
            "approve",
            channel=session.channel_id,
            user=user,
            requester=row.requested_by,
            user_team=team,
            home_team=session.team_id if team else None,
            decision=call_decision(self.ctx, row),
        )
        if verdict.kind == "refused":
            await store.audit(
                "refusal",
                actor=user,
                session_id=row.session_id,
                call_id=row.call_id,
                details={"reason": verdict.reason, "rule": verdict.rule, "decision": action},
            )
            return NotAllowed(verdict)
        return row, session

    # -- edit ------------------------------------------------------------------------------------

    async def form(self, ledger_id: str, *, user: str, team: str | None) -> EditForm | Notice:
        """The prefilled edit form, or why `user` may not edit the call."""
        found = await self._pending(ledger_id, user=user, team=team, action="edited")
        if not isinstance(found, tuple):
            return found
        row, _ = found
        if not self.ctx.policy.tool_policy(row.tool).allow_edit:
            return DecisionNotRecorded(EditNotAllowed(row.tool))
        arguments = row.running_arguments()
        arguments = arguments if isinstance(arguments, dict) else {}
        if row.tool == _COMMAND_TOOL:
            command = arguments.get(COMMAND_FIELD)
            text = command if isinstance(command, str) else ""
            field = EditField(COMMAND_FIELD, text, required=True)
            return EditForm(row.id, row.tool, row.running_digest, (field,), command=True)
        return EditForm(row.id, row.tool, row.running_digest, _fields(self._tool(row), arguments))

    async def submit(
        self, ledger_id: str, values: Mapping[str, str | None], *, user: str, team: str | None
    ) -> EditErrors | Notice | None:
        """Approve the call with the submitted arguments. `EditErrors` when they do not fit
        the tool's schema (nothing recorded); a notice for `user` alone when nothing changed."""
        found = await self._pending(ledger_id, user=user, team=team, action="edited")
        if not isinstance(found, tuple):
            return found
        row, session = found
        if not self.ctx.policy.tool_policy(row.tool).allow_edit:
            return DecisionNotRecorded(EditNotAllowed(row.tool))
        current = row.running_arguments()
        current = current if isinstance(current, dict) else {}
        tool = self._tool(row)
        parsed = _parse(tool, row.tool, current, values)
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
        verdict = await self.ctx.approvals.check(
            "approve",
            channel=session.channel_id,
            user=user,
            requester=row.requested_by,
            user_team=team,
            home_team=session.team_id if team else None,
            decision=decision,
        )
        if verdict.kind == "refused":
            return NotAllowed(verdict)
        outcome = await self.ctx.store.edit_call(
            ledger_id,
            canonical_arguments(parsed),
            call_digest(row.tool, parsed),
            user_id=user,
            team_id=team,
            required_approvals=self.ctx.policy.required_approvals_for(session.channel_id, decision),
            rule="edit",
        )
        if outcome.recorded and outcome.row.status == "approved":
            note_decision(self.ctx, outcome.row, "edited")
        await self.cards.refresh(outcome.row)
        await self._resume(row.session_id)
        if not outcome.recorded:
            return DecisionNotRecorded(outcome.why or already_reason(outcome.row))
        return None

    def _tool(self, row: ToolCallRow) -> Tool | None:
        return self.ctx.tools.get(row.tool)

    # -- allow -----------------------------------------------------------------------------------

    async def allow_form(
        self, ledger_id: str, *, user: str, team: str | None
    ) -> AllowForm | Notice | None:
        """The Allow dialog when the granter has shapes to choose from; None when the click
        allows at once (one shape, or the rule's `allow_prefix`); else why `user` may not."""
        found = await self._pending(ledger_id, user=user, team=team, action="allowed")
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
        found = await self._pending(ledger_id, user=user, team=team, action="allowed")
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
        if digest is not None and digest != row.running_digest:
            outcome = await self.ctx.store.decide(
                ledger_id,
                "approved",
                user_id=user,
                team_id=team,
                rule="allow_for",
                policy_rule=decision.policy_rule,
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
                rule="allow_for",
                policy_rule=decision.policy_rule,
                digest=row.running_digest,
            )
            outcome = allowed.decision
            if allowed.allowance is not None:
                note_decision(self.ctx, outcome.row, "allowed")
                thread = await self.cards.thread(row)
                if thread is not None:
                    await self.ctx.output.say(thread, AllowanceGranted(info(allowed.allowance)))
        await self.cards.refresh(outcome.row)
        await self._resume(row.session_id)
        if not outcome.recorded:
            return DecisionNotRecorded(outcome.why or already_reason(outcome.row))
        return None


def _fields(tool: Tool | None, arguments: Mapping[str, Any]) -> tuple[EditField, ...]:
    """One field per argument of the tool's schema (and any the model sent beyond it)."""
    schema = tool.parameters if tool is not None else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = set(schema.get("required") or ())
    names = list(properties) + [n for n in arguments if n not in properties]
    fields = []
    for name in names:
        spec = properties.get(name)
        spec = spec if isinstance(spec, dict) else {}
        value = arguments.get(name)
        text = (
            "" if name not in arguments else value if isinstance(value, str) else json.dumps(value)
        )
        description = spec.get("description")
        fields.append(
            EditField(
                name,
                text,
                required=name in required,
                description=description if isinstance(description, str) else "",
            )
        )
    return tuple(fields)


def _parse(
    tool: Tool | None, name: str, current: Mapping[str, Any], values: Mapping[str, str | None]
) -> dict[str, Any] | EditErrors:
    """The submitted form as arguments, validated against the tool's schema."""
    schema = tool.parameters if tool is not None else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    errors: dict[str, str] = {}
    if name == _COMMAND_TOOL:
        parsed: dict[str, Any] = dict(current)
        command = values.get(COMMAND_FIELD)
        if command is None or not command.strip():
            return EditErrors({COMMAND_FIELD: "Write the command to run."})
        parsed[COMMAND_FIELD] = command
    else:
        parsed = {}
        for field, text in values.items():
            if text is None or text == "":
                continue
            spec = properties.get(field)
            if isinstance(spec, dict) and spec.get("type") == "string":
                parsed[field] = text
                continue
            try:
                parsed[field] = json.loads(text)
            except ValueError:
                parsed[field] = text  # a bare word for a string-or-else field; the schema judges
    try:
        jsonschema.validate(parsed, schema or {"type": "object"})
    except jsonschema.ValidationError as exc:
        where = str(exc.path[0]) if exc.path else _missing(exc) or next(iter(values), "")
        errors[where] = exc.message[:150]
    except jsonschema.SchemaError:
        pass  # the tool's own schema is broken: the tool itself validates what it gets
    return EditErrors(errors) if errors else parsed


def _missing(exc: jsonschema.ValidationError) -> str | None:
    """The field a "required" error names."""
    if exc.validator == "required" and isinstance(exc.instance, dict):
        for wanted in exc.validator_value or ():
            if wanted not in exc.instance:
                return str(wanted)
    return None
