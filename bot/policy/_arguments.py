"""A tool call's arguments as the policy file speaks of them: `ArgumentRule` ("approval is
needed when this argument matches this pattern") and `preview_args` (the arguments a tool's
paired read-only preview tool is called with, built from the gated call's own).

One model for the built-in tools' `[[tools.X.rules]]` and MCP tools'
`[[mcp_servers.NAME.tools.TOOL.rules]]`, and one for `preview_args` in `[tools.NAME]` and
`[mcp_servers.NAME.tools.TOOL]`. In `preview_args`, a value that is exactly `"{name}"` is the
call's argument `name` as it is (any JSON type); a text with placeholders inside
(`"web-{name}"`) gets their text; any other value is passed as written (tables and arrays are
filled the same way, all the way down). A placeholder the call has no value for (nor a schema
default) builds nothing: the preview fails saying which.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictStr

from agent_core import canonical_arguments

__all__ = [
    "ArgumentRule",
    "PreviewArgs",
    "Regex",
    "argument_label",
    "argument_matches",
    "check_tool_preview",
    "fill_preview_args",
    "schema_defaults",
]

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _regex(value: Any) -> Any:
    if isinstance(value, re.Pattern):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a pattern is a regular expression written as text, not {value!r}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a valid regular expression: {exc}") from None


Regex = Annotated[re.Pattern[str], BeforeValidator(_regex)]
"""A regular expression written as text in the policy file, compiled when it is read."""


class ArgumentRule(BaseModel):
    """Approval is needed when `argument` matches `pattern` (re.search).

    Non-text values are matched in their canonical JSON spelling. A missing argument takes the
    default from the tool's schema when the tool is known, and otherwise matches nothing.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    argument: Annotated[StrictStr, Field(min_length=1)]
    pattern: Regex
    name: StrictStr | None = None
    """A label for the audit log; without one the rule is named by its place and pattern."""

    def matches(self, arguments: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
        return argument_matches(self.argument, self.pattern, arguments, defaults)

    @property
    def label(self) -> str:
        """How the audit log and `/opsgate help` name the rule."""
        return self.name or argument_label(self.argument, self.pattern)


def argument_matches(
    argument: str,
    pattern: re.Pattern[str],
    arguments: Mapping[str, Any],
    defaults: Mapping[str, Any],
) -> bool:
    """Whether `pattern` is found in the call's `argument` (or its schema default): the one
    matching of an argument rule, here and in a tool's `[[tools.X.rules]]`."""
    if argument in arguments:
        value = arguments[argument]
    elif argument in defaults:
        value = defaults[argument]
    else:
        return False
    text = value if isinstance(value, str) else canonical_arguments(value)
    return pattern.search(text) is not None


def argument_label(argument: str, pattern: re.Pattern[str]) -> str:
    """How an unnamed argument rule is named: `argument ~ /pattern/`."""
    return f"{argument} ~ /{pattern.pattern}/"


def schema_defaults(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The `default` of each property of a tool's JSON Schema: what a missing argument means."""
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict):
        return {}
    return {
        key: spec["default"]
        for key, spec in properties.items()
        if isinstance(spec, dict) and "default" in spec
    }


def _check(value: Any) -> None:
    if isinstance(value, str):
        for name in _PLACEHOLDER.findall(value):
            if not _NAME.match(name):
                raise ValueError(
                    f"{value!r}: {{{name}}} is not an argument name (write {{service}} for the "
                    "call's argument `service`)"
                )
        if "{" in _PLACEHOLDER.sub("", value) or "}" in _PLACEHOLDER.sub("", value):
            raise ValueError(f"{value!r}: unbalanced braces")
    elif isinstance(value, Mapping):
        for item in value.values():
            _check(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _check(item)


def _checked(value: dict[str, Any]) -> dict[str, Any]:
    _check(value)
    return value


PreviewArgs = Annotated[dict[StrictStr, Any], AfterValidator(_checked)]
"""A `preview_args` table, its placeholders checked when the file is read."""


class _Missing(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def fill_preview_args(
    template: Mapping[str, Any], arguments: Mapping[str, Any], defaults: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, str | None]:
    """The preview tool's arguments, or (None, why) when a placeholder has no value."""
    values = {**defaults, **arguments}
    try:
        return {k: _fill(v, values) for k, v in template.items()}, None
    except _Missing as missing:
        return None, f"no value for {{{missing.name}}} in this call"


def _fill(value: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(value, Mapping):
        return {k: _fill(v, values) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_fill(v, values) for v in value]
    if not isinstance(value, str):
        return value
    whole = _PLACEHOLDER.fullmatch(value)
    if whole is not None:
        return _value(whole.group(1), values)

    def one(found: re.Match[str]) -> str:
        got = _value(found.group(1), values)
        return got if isinstance(got, str) else json.dumps(got, ensure_ascii=False)

    return _PLACEHOLDER.sub(one, value)


def _value(name: str, values: Mapping[str, Any]) -> Any:
    if name not in values or values[name] is None:
        raise _Missing(name)
    return values[name]


def check_tool_preview(
    preview: str | None, args: object, ttl: object, approval: str | None
) -> None:
    """The checks of a tool section's `preview` keys (`[tools.NAME]`, `[mcp_servers...]`)."""
    if preview is None:
        if args is not None or ttl is not None:
            raise ValueError("preview_args and preview_ttl need a `preview` (the tool to call)")
        return
    if approval in ("never", "forbidden"):
        raise ValueError(
            f'a `preview` is shown on approval cards, but approval = "{approval}" posts none'
        )
