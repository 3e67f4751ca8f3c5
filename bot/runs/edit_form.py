"""The Edit form of a gated call, and reading a submitted one back: a field per argument of the
tool's schema, the command alone for `run_command`, or one JSON field past `EDIT_FIELDS_MAX`
arguments (Slack's 100 blocks); what is submitted is validated against the tool's schema
(`bot.runs.edits` records it)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema

from agent_core import Tool

from ..store import ToolCallRow
from .views import EditErrors, EditField, EditForm

__all__ = [
    "ARGUMENTS_FIELD",
    "COMMAND_FIELD",
    "COMMAND_TOOL",
    "EDIT_FIELDS_MAX",
    "EDIT_TEXT_MAX",
    "edit_form",
    "json_arguments",
    "parse_form",
]

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
