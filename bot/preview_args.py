"""`preview_args`: the arguments a custom or MCP tool's paired read-only preview tool is called
with, built from the gated call's own arguments.

Shared by `[tools.NAME]` (bot.policy) and `[mcp_servers.NAME.tools.TOOL]` (bot.tools.mcp), so
it lives below both, like `bot.argument_rule`. A value that is exactly `"{name}"` is the call's
argument `name` as it is (any JSON type); a text with placeholders inside (`"web-{name}"`) gets
their text; any other value is passed as written (tables and arrays are filled the same way,
all the way down). A placeholder the call has no value for (nor a schema default) builds
nothing: the preview fails saying which.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, StrictStr

__all__ = ["PreviewArgs", "check_tool_preview", "fill_preview_args"]

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


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
