"""`ArgumentRule`: "approval is needed when this argument matches this pattern".

One model for the built-in tools' `[[tools.X.rules]]` and MCP tools'
`[[mcp_servers.NAME.tools.TOOL.rules]]`. It lives below both `bot.policy` and `bot.tools.mcp`
because the policy file holds the MCP settings: the two packages import it, not each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr

from agent_core import canonical_arguments

__all__ = [
    "ArgumentRule",
    "Regex",
    "argument_label",
    "argument_matches",
    "schema_defaults",
]


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
