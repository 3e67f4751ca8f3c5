"""What an approval card, `/opsgate pending` and `/opsgate help` show, as plain data.

The run service builds these from the store and the policy; each `ThreadOutput` renders them
(Slack: Block Kit and mrkdwn in `bot.slack`; the terminal: plain text). Arguments and
descriptions are untrusted: renderers escape them.

The Edit form is drawn here from the tool's schema (`edit_form`) and read back against it
(`parse_form`): its fields, their names and limits are the form's own, so the view, the one
that builds it and the one that reads it agree by being in one place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import jsonschema

from agent_core import Tool

from ..store import ToolCallRow
from ..store.ladder import Delegation
from ..store.models import CardLock

__all__ = [
    "ARGUMENTS_FIELD",
    "COMMAND_FIELD",
    "COMMAND_TOOL",
    "EDIT_FIELDS_MAX",
    "EDIT_TEXT_MAX",
    "PREVIEW_CHARS",
    "PREVIEW_LINES",
    "AllowChoice",
    "AllowForm",
    "AllowanceInfo",
    "CardCall",
    "CardDrawing",
    "CardOutcome",
    "CardPart",
    "CardPreview",
    "CardRef",
    "CardRequirement",
    "ChannelHelp",
    "EditErrors",
    "EditField",
    "EditForm",
    "FreezeInfo",
    "GlassInfo",
    "HomeView",
    "OutcomeStatus",
    "OutsideAsk",
    "PendingEntry",
    "ServerTool",
    "edit_form",
    "json_arguments",
    "parse_form",
    "preview_file",
]


OutcomeStatus = Literal["approved", "rejected", "expired", "cancelled"]


@dataclass(frozen=True, slots=True)
class CardRef:
    """Where a posted card lives, so it can be redrawn or linked to."""

    channel_id: str
    ts: str
    locked: CardLock | None = None
    """Set by `post_card` when the card was posted without its Approve button, and why."""


@dataclass(frozen=True)
class ServerTool:
    """The MCP server tool a card asks about: which server, which tool, and what the server
    says about it (its annotations are hints from the server, shown as such)."""

    server: str
    tool: str
    """The tool's name on its server (the model calls it `server__tool`)."""
    title: str | None
    """The server's title for the tool (untrusted text)."""
    labels: tuple[str, ...]
    """Its annotations in words, e.g. ("destructive", "open world")."""
    destructive: bool
    """The server annotated it `destructiveHint: true`: the card says so prominently."""


@dataclass(frozen=True)
class CardPreview:
    """The deciding rule's preview as a card shows it: the read-only command that ran, its
    output (untrusted), exit status, when it ran and the digest the approval is bound to."""

    command: str
    """What ran, shell-quoted (or the template, when nothing could run)."""
    output: str
    exit_status: int | None
    failed: str | None
    """Why the card says "preview failed" (None: it did not fail)."""
    ran_at: datetime
    digest: str
    file: str | None = None
    """The file in the thread holding the whole output, when it is longer than a card shows
    (`PREVIEW_LINES` lines, `PREVIEW_CHARS` characters)."""
    inputs: tuple[tuple[str, str, str | None], ...] = ()
    """The files it read, bound to the approval: (path as written, "file", "directory",
    "absent" or "unreadable", SHA-256 of the content)."""


PREVIEW_LINES = 20
"""Lines of a preview's output a card shows at most; a longer one is attached whole."""
PREVIEW_CHARS = 1_500
"""Characters of a preview's output beyond which it is attached whole too (the card's block
budget may cut long lines earlier than `PREVIEW_LINES`)."""


def preview_file(call_id: str, output: str, digest: str) -> str | None:
    """The name of the file a preview's whole output is attached as, or None when the card
    shows it all; one name per output (its digest), so a changed preview gets its own file."""
    lines = output.rstrip("\n").count("\n") + 1 if output.strip() else 0
    if lines <= PREVIEW_LINES and len(output) <= PREVIEW_CHARS:
        return None
    return f"preview-{call_id}-{digest[:12]}.txt"


@dataclass(frozen=True, slots=True)
class CardRequirement:
    """One rule a call with several must meet: the rule in words, its quorum, who has approved
    toward it, and who may (both empty: anyone in the channel)."""

    rule: str
    needed: int
    approved_by: tuple[str, ...]
    approver_users: tuple[str, ...] = ()
    approver_groups: tuple[str, ...] = ()

    @property
    def met(self) -> bool:
        return len(self.approved_by) >= self.needed


@dataclass(frozen=True, slots=True)
class CardPart:
    """One simple command of a shell command as the policy judged it (`policy explain`'s
    words): its text (untrusted), the tier, the rule, and why."""

    text: str
    tier: str
    rule: str | None
    why: str


@dataclass(frozen=True)
class OutsideAsk:
    """Who asked for a call from outside OpsGate (`bot.plane`): OpsGate will not run it."""

    client: str
    reason: str | None = None


@dataclass(frozen=True)
class CardCall:
    """Everything a card shows; the service builds it from a ledger row."""

    ledger_id: str
    """Opaque id, the only thing a button value carries."""
    tool: str
    description: str
    arguments: Any
    """The stored arguments: a dict, or the raw string when the model's JSON did not parse."""
    digest: str
    requested_by: str | None
    """User id of the requester, or None."""
    call_id: str = ""
    """The provider's tool call id (names an attachment holding arguments too long to show)."""
    held: tuple[tuple[str, Any], ...] = ()
    """Sibling calls (tool name, arguments) that run once the batch is decided."""
    required_approvals: int = 1
    approvals: tuple[str, ...] = ()
    """User ids that approved so far."""
    server_tool: ServerTool | None = None
    """Set when the tool is an MCP server's."""
    edited_by: str | None = None
    """Who changed the arguments (then `arguments` and `digest` are the edited call's)."""
    original_arguments: Any = None
    """The model's arguments, when a human edited them."""
    can_edit: bool = False
    """The card offers "Edit" (policy `allow_edit`)."""
    allow_for: str | None = None
    """The card offers "Allow for <allow_for>" (policy `allow_for`, one approval needed)."""
    allow_scope: str = ""
    """What that allowance would cover, for the button's confirmation."""
    allow_dialog: bool = False
    """"Allow for" opens a dialog to choose the shape (instead of a confirmation)."""
    locked: CardLock | None = None
    """Why the card may not be approved (no Approve button; rejecting still works)."""
    expires_at: datetime | None = None
    """When the call expires undecided (aware UTC); None before the deadline is set."""
    approver_users: tuple[str, ...] = ()
    approver_groups: tuple[str, ...] = ()
    """Who may approve (policy ids); both empty: anyone in the channel."""
    escalated_to: tuple[str, ...] = ()
    """Who its escalation ladder added (users and groups), once a step passed."""
    asked_at: datetime | None = None
    """When the call began to wait (the Home tab says how long ago)."""
    policy_rule: str | None = None
    """The policy rule that gated the call, in words (`tools.run_command.rules[1] (kubectl
    delete …)`); None when no rule of its own did."""
    justification: str | None = None
    """That rule's `justification` (the operator's words)."""
    preview: CardPreview | None = None
    """The deciding rule's preview; None when its rule declares none."""
    # -- change freezes and break-glass (`bot.runs.freezes`) --
    frozen: str | None = None
    """The change freeze that blocks the call, in words; then no Approve, Edit or Allow."""
    frozen_until: datetime | None = None
    freeze_message: str | None = None
    break_glass: bool = False
    """The frozen card offers "Break glass" (the policy's `break_glass`)."""
    glass: GlassInfo | None = None
    """Someone broke glass on this call: the decided card keeps "Mark reviewed" until then."""
    # -- what the person decides on, beyond the call itself --
    model_reason: str | None = None
    """What the model said of the call when it asked for it (its turn's text, or the call's
    `reason`/`justification` argument): the model's words, untrusted."""
    requirements: tuple[CardRequirement, ...] = ()
    """Each rule that must approve, when more than one does (then `required_approvals` and
    the approvers above are the deciding rule's alone)."""
    parts: tuple[CardPart, ...] = ()
    """run_command: each simple command the policy judged, and why."""
    no_allow: str | None = None
    """Why the card offers no "Allow for", in words (None: it offers one, or the tool has no
    allowances to speak of)."""
    outside: OutsideAsk | None = None
    """An outside request's: who asked and why; the caller runs the command, not OpsGate."""


@dataclass(frozen=True, slots=True)
class GlassInfo:
    """A break-glass use on a call: who, why, and who reviewed it (None: not yet)."""

    ledger_id: str
    channel: str
    broken_by: str
    reason: str
    freeze: str
    broken_at: datetime
    reviewed_by: str | None = None


@dataclass(frozen=True, slots=True)
class FreezeInfo:
    """A change freeze in force: its name, until when, why, where."""

    label: str
    until: datetime
    message: str | None = None
    channels: tuple[str, ...] | None = None
    started_by: str | None = None


@dataclass(frozen=True)
class CardOutcome:
    """How a decided card ends; with it, a card has no buttons any more."""

    status: OutcomeStatus
    decided_by: str | None
    decided_at: datetime
    reason: str | None = None
    ran: bool = False
    """An approved call that has run (the card says "ran", not "was approved")."""
    ended: str | None = None
    """How a call that ran ended, in the first line of its result ("exit code: 0"); untrusted."""
    failed: bool = False
    """The run ended in an error (the tool raised, timed out)."""


@dataclass(frozen=True)
class CardDrawing:
    """A card as its call's state says it should look now: what a redraw sends, and `state`
    (`bot.store.card_state`), which the ledger records as drawn once it was sent."""

    ref: CardRef
    card: CardCall
    outcome: CardOutcome | None
    state: str


@dataclass(frozen=True)
class PendingEntry:
    """One approval waiting for the person who asked for their pending list."""

    tool: str
    channel: str
    requested_by: str | None
    permalink: str | None
    expires_at: datetime | None = None
    approvals: int = 0
    required_approvals: int = 1


@dataclass(frozen=True)
class ChannelHelp:
    """What help says about one channel."""

    channel: str
    acts_here: bool
    trigger: str
    allowed_bots: tuple[str, ...]
    approver_users: tuple[str, ...]
    approver_groups: tuple[str, ...]
    """Neither users nor groups: anyone in the channel may approve."""
    required_approvals: int
    allow_self_approval: bool
    ttl: str
    tools: tuple[tuple[str, str], ...]
    """(tool name, when it asks for approval) for each tool offered in the channel."""
    concurrency: int
    has_instructions: bool
    policy_source: str
    freezes: tuple[FreezeInfo, ...] = ()
    """Change freezes in force in the channel now."""


# -- ux ------------------------------------------------------------------------------------------
# What edits, allowances, the Home tab and the message shortcut show, as plain data, and the
# notices they add.
#
# The run service builds these from the store and the policy; `bot.slack` renders them (Block Kit
# and mrkdwn, escaping untrusted text through `bot.slack.mrkdwn`).


@dataclass(frozen=True, slots=True)
class AllowanceInfo:
    """An active allowance: calls of `tool` shaped like `label` run in `channel` until
    `expires_at` without a card."""

    id: str
    channel: str
    tool: str
    label: str
    granted_by: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class AllowChoice:
    """One shape an "Allow for" may create: its fixed words, and commands it does and does not
    cover (generated from it, for the granter to see)."""

    label: str
    matching: tuple[str, ...]
    not_matching: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AllowForm:
    """The Allow dialog of a pending call whose shape the granter chooses (the default
    first). `digest` binds the choice to the call as it was when the dialog opened."""

    ledger_id: str
    tool: str
    digest: str
    window: str
    choices: tuple[AllowChoice, ...]


@dataclass(frozen=True, slots=True)
class EditField:
    """One field of the edit form: an argument, prefilled with its current value as text
    (strings as they are, anything else as JSON)."""

    name: str
    value: str
    required: bool
    description: str = ""


@dataclass(frozen=True, slots=True)
class EditForm:
    """The edit form of a pending call: for `run_command` the one command field, otherwise
    one field per argument of the tool's schema."""

    ledger_id: str
    tool: str
    digest: str
    fields: tuple[EditField, ...]
    command: bool = False
    """True for `run_command`: one plain text field holding exactly the command."""
    as_json: bool = False
    """True for a tool with more arguments than a form shows fields: one field holding all the
    arguments as a JSON object (`ARGUMENTS_FIELD`)."""


@dataclass(frozen=True, slots=True)
class EditErrors:
    """The submitted form does not fit the tool's schema: a message per field name."""

    errors: dict[str, str]


@dataclass(frozen=True)
class HomeView:
    """A person's Home tab."""

    user: str
    to_decide: tuple[CardCall, ...] = ()
    """Calls `user` may decide now (with Approve, Reject, Edit)."""
    waiting: tuple[CardCall, ...] = ()
    """`user`'s own requests waiting for someone else (no Approve)."""
    allowances: tuple[AllowanceInfo, ...] = ()
    policy: str = ""
    """One paragraph: what needs approval and who decides."""
    channels: tuple[str, ...] = field(default=())
    """The channels the allowances and approvals were gathered from."""
    freezes: tuple[FreezeInfo, ...] = ()
    """Change freezes in force now."""
    unreviewed: tuple[GlassInfo, ...] = ()
    """Break-glass uses nobody has reviewed yet."""
    delegations: tuple[Delegation, ...] = ()
    """Delegations in force that `user` gave or holds (`/opsgate delegate`)."""
    opened: bool = False
    """Drawn because `user` opened the tab (shown at once), not after a change they see (a
    burst of those is shown once, with the latest view)."""


# -- the Edit form, drawn and read back -------------------------------------------------------
# The Edit form of a gated call, and reading a submitted one back: a field per argument of the
# tool's schema, the command alone for `run_command`, or one JSON field past `EDIT_FIELDS_MAX`
# arguments (Slack's 100 blocks); what is submitted is validated against the tool's schema
# (`bot.runs.edits` records it).


COMMAND_FIELD = "command"
ARGUMENTS_FIELD = "arguments"
"""The one field of a JSON edit form (a tool with more than `EDIT_FIELDS_MAX` arguments)."""
EDIT_TEXT_MAX = 3000
"""The longest value an edit field holds whole (Slack's plain-text input limit). A call with a
longer value gets no form: a form cannot show it, and a cut value would run cut."""
EDIT_FIELDS_MAX = 40
"""Most fields in a form (a Slack modal holds 100 blocks); beyond, one JSON field."""
COMMAND_TOOL = "run_command"
"""The tool whose form is its command alone."""


def edit_form(row: ToolCallRow, tool: Tool | None, arguments: dict[str, Any]) -> EditForm:
    """The form for `row`: the command alone, a field per argument, or one JSON field."""
    if row.tool == COMMAND_TOOL:
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


def json_arguments(tool: Tool | None, text: str | None) -> dict[str, Any] | EditErrors:
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


def parse_form(
    tool: Tool | None, name: str, current: Mapping[str, Any], values: Mapping[str, str | None]
) -> dict[str, Any] | EditErrors:
    """The submitted form as arguments, validated against the tool's schema."""
    schema = tool.parameters if tool is not None else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    errors: dict[str, str] = {}
    if name == COMMAND_TOOL:
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
