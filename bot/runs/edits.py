"""Edit before approving, and "Allow for <duration>": two ways to approve a gated call.

An edit approves a new call (docs/architecture.md): the ledger keeps the model's arguments and
the edited ones, the card shows the edited arguments and digest, approvals given to the old
arguments do not count, and the model's tool message says a human changed the arguments. The
editor must be allowed to approve (the requester is not). An "Allow for" click approves the call
and, once the approval is final, creates an allowance (`bot.runs.edits`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import jsonschema

from agent_core import ApprovalGate, Tool, ToolCall, call_digest, canonical_arguments

from ..allowances import dump_shape, load_shape, shape_of
from ..store import (
    AllowanceGrant,
    AllowanceRow,
    EditNotAllowed,
    NoAllowanceOffered,
    SelfAllow,
    SessionRow,
    ToolCallRow,
    already_reason,
)
from .cards import Cards, allow_window, scope
from .context import RunContext, thread_of
from .gate import authorize_on, refusal_notice
from .metrics import note_decision
from .notices import (
    AllowanceGranted,
    AllowanceRevoked,
    AllowanceUsed,
    DecisionNotRecorded,
    NotEditable,
    NothingRevoked,
    Notice,
    UnknownRequest,
)
from .output import Thread
from .views import AllowanceInfo, EditErrors, EditField, EditForm

__all__ = [
    "ARGUMENTS_FIELD",
    "COMMAND_FIELD",
    "EDIT_FIELDS_MAX",
    "EDIT_TEXT_MAX",
    "Allowances",
    "Edits",
    "info",
]


COMMAND_FIELD = "command"
ARGUMENTS_FIELD = "arguments"
"""The one field of a JSON edit form (a tool with more than `EDIT_FIELDS_MAX` arguments)."""
EDIT_TEXT_MAX = 3000
"""The longest value an edit field holds whole (Slack's plain-text input limit). A call with a
longer value gets no form: a form cannot show it, and a cut value would run cut."""
EDIT_FIELDS_MAX = 40
"""Most fields in a form (a Slack modal holds 100 blocks); beyond, one JSON field."""
_DECISION = {"edit": "edited", "allow": "allowed"}
"""The audit's word for each action (as before the one gate)."""
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
        self, ledger_id: str, *, user: str, team: str | None, action: Literal["edit", "allow"]
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
        verdict = await authorize_on(
            self.ctx, action, user=user, team=team, session=session, row=row
        )
        if verdict.kind == "refused":
            await store.audit(
                "refusal",
                actor=user,
                session_id=row.session_id,
                call_id=row.call_id,
                details={
                    "reason": verdict.reason,
                    "rule": verdict.rule,
                    "decision": _DECISION[action],
                    "team_id": team,
                },
            )
            return refusal_notice(verdict, row)
        return row, session

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
        form = _form(row, self._tool(row), arguments)
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
        if ARGUMENTS_FIELD in values and len(values) == 1 and row.tool != _COMMAND_TOOL:
            parsed = _json_arguments(tool, values[ARGUMENTS_FIELD])
        else:
            parsed = _parse(tool, row.tool, current, values)
        if isinstance(parsed, EditErrors):
            return parsed
        if canonical_arguments(parsed) == canonical_arguments(current):
            return await self._decide(ledger_id, "approved", user=user, team=team)
        outcome = await self.ctx.store.edit_call(
            ledger_id,
            canonical_arguments(parsed),
            call_digest(row.tool, parsed),
            user_id=user,
            team_id=team,
            required_approvals=self.ctx.policy.required_approvals_for(session.channel_id),
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

    async def allow(
        self, ledger_id: str, *, user: str, team: str | None, digest: str | None = None
    ) -> Notice | None:
        """Approve the call and allow its shape in the channel for the policy's `allow_for`,
        in one store transaction. `digest` is what the clicked card showed (None: unknown)."""
        found = await self._pending(ledger_id, user=user, team=team, action="allow")
        if not isinstance(found, tuple):
            return found
        row, session = found
        if row.requested_by == user:
            return DecisionNotRecorded(SelfAllow())
        if not self.allowances.offered(row.tool, session.channel_id):
            return DecisionNotRecorded(NoAllowanceOffered(row.tool))
        # The allowance's shape is read from `row`; binding the approval to `row`'s digest
        # means an edit committed since makes the store refuse rather than allow a stale shape.
        if digest is not None and digest != row.running_digest:
            outcome = await self.ctx.store.decide(
                ledger_id, "approved", user_id=user, team_id=team, rule="allow_for", digest=digest
            )
        else:
            allowed = await self.ctx.store.allow_call(
                ledger_id,
                self.allowances.grant_for(row, session),
                user_id=user,
                team_id=team,
                reason=f"approved and allowed: {scope(row)}",
                rule="allow_for",
                digest=row.running_digest,
            )
            outcome = allowed.decision
            if allowed.allowance is not None:
                note_decision(self.ctx, outcome.row, "allowed")
                thread = await thread_of(self.ctx, row)
                if thread is not None:
                    await self.ctx.output.say(thread, AllowanceGranted(info(allowed.allowance)))
        await self.cards.refresh(outcome.row)
        await self._resume(row.session_id)
        if not outcome.recorded:
            return DecisionNotRecorded(outcome.why or already_reason(outcome.row))
        return None


def _form(row: ToolCallRow, tool: Tool | None, arguments: dict[str, Any]) -> EditForm:
    """The form for `row`: the command alone, a field per argument, or one JSON field."""
    if row.tool == _COMMAND_TOOL:
        command = arguments.get(COMMAND_FIELD)
        text = command if isinstance(command, str) else ""
        field = EditField(COMMAND_FIELD, text, required=True)
        return EditForm(row.id, row.tool, row.running_digest, (field,), command=True)
    fields = _fields(tool, arguments)
    if len(fields) <= EDIT_FIELDS_MAX:
        return EditForm(row.id, row.tool, row.running_digest, fields)
    text = json.dumps(arguments, indent=1, ensure_ascii=False)
    field = EditField(ARGUMENTS_FIELD, text, required=True, description="a JSON object")
    return EditForm(row.id, row.tool, row.running_digest, (field,), as_json=True)


def _json_arguments(tool: Tool | None, text: str | None) -> dict[str, Any] | EditErrors:
    """A JSON form's object, validated against the tool's schema."""
    try:
        value = json.loads(text or "")
    except ValueError as exc:
        return EditErrors({ARGUMENTS_FIELD: f"Not JSON: {exc}"[:150]})
    if not isinstance(value, dict):
        return EditErrors({ARGUMENTS_FIELD: "Write a JSON object of the arguments."})
    schema = tool.parameters if tool is not None else {}
    try:
        jsonschema.validate(value, schema or {"type": "object"})
    except jsonschema.ValidationError as exc:
        return EditErrors({ARGUMENTS_FIELD: exc.message[:150]})
    except jsonschema.SchemaError:
        pass  # the tool's own schema is broken: the tool itself validates what it gets
    return value


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


# -- allow ---------------------------------------------------------------------------------------
# Allowances in the run service: granting one from a card, the per-run gate that applies them,
# listing and revoking.
#
# An allowance applies only where the policy still offers "Allow for" for the tool (`allow_for`
# set) in a channel needing a single approval, and only to calls the policy would otherwise
# gate: a policy that says `approval = "always"` without `allow_for` is never bypassed. Using one
# claims nothing (two runs may use it at once); each use is audited and said in the thread.


logger = logging.getLogger("opsgate.runs")


def info(row: AllowanceRow) -> AllowanceInfo:
    return AllowanceInfo(
        row.id, row.channel_id, row.tool, row.label, row.granted_by, row.expires_at
    )


class Allowances:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def offered(self, tool: str, channel: str) -> bool:
        """Whether a card of `tool` in `channel` offers "Allow for <duration>"."""
        return allow_window(self.ctx, tool, channel) is not None

    def grant_for(self, row: ToolCallRow, session: SessionRow) -> AllowanceGrant:
        """The allowance an "Allow for" click on `row` asks for (stored with its approval)."""
        window = self.ctx.policy.tool_policy(row.tool).allow_for
        assert window is not None
        arguments = row.running_arguments()
        shape = shape_of(row.tool, arguments if isinstance(arguments, dict) else {})
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


class _Gate:
    def __init__(self, owner: Allowances, thread: Thread, session_id: str) -> None:
        self.owner = owner
        self.thread = thread
        self.session_id = session_id

    async def __call__(self, tool: Tool, call: ToolCall) -> bool:
        ctx = self.owner.ctx
        if not ctx.policy.gate(tool, call):
            return False
        if not self.owner.offered(tool.name, self.thread.channel_id):
            return True
        arguments = call.parsed_arguments()
        for row in await ctx.store.active_allowances(
            channel_id=self.thread.channel_id, now=ctx.clock()
        ):
            shape = load_shape(row.shape)
            if row.tool == tool.name and shape is not None and shape.matches(arguments):
                await self._used(row, call)
                return False
        return True

    async def _used(self, row: AllowanceRow, call: ToolCall) -> None:
        ctx = self.owner.ctx
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
