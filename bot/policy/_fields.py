"""The value types of the policy file: Slack ids, durations, directories, patterns, and the two that
speak of a tool call's arguments (`ArgumentRule`, `preview_args`; their section is at the end, with
how a call's arguments fill them).

Each validator says what it expected in words a person editing the file can act on; the message
ends up after the key's name in `PolicyError` (see `_load.explain`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
)

from agent_core import canonical_arguments
from bot.words import parse_duration

__all__ = [
    "DEFAULT_REJECT_REASONS",
    "GROUP_ID",
    "AllowWindow",
    "Approvals",
    "ApproverId",
    "ArgumentRule",
    "BotId",
    "ChannelId",
    "Concurrency",
    "Directory",
    "Duration",
    "Instructions",
    "OsUser",
    "OutputLimit",
    "PreviewArgs",
    "Regex",
    "RejectReason",
    "ToolName",
    "Trigger",
    "argument_label",
    "argument_matches",
    "check_reachable",
    "check_tool_preview",
    "fill_preview_args",
    "schema_defaults",
    "unique",
]

USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
GROUP_ID = re.compile(r"S[A-Z0-9]{2,}")
CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,}")
BOT_ID = re.compile(r"[BA][A-Z0-9]{2,}")


def _duration(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f'durations are written as text, like "90s", "15m", "2h", not {value!r}')
    parsed = parse_duration(value)
    if parsed <= timedelta(0):
        raise ValueError(f"{value!r} is zero; a duration must be longer than that")
    return parsed


def _allow_window(value: timedelta) -> timedelta:
    if value < timedelta(seconds=1):
        raise ValueError("an allowance lasts at least 1s")
    return value


ONCALL_ENTRY = re.compile(r"oncall:[A-Za-z0-9_-]+")


def _approver_id(value: str) -> str:
    if ONCALL_ENTRY.fullmatch(value):
        return value
    if not (USER_ID.fullmatch(value) or GROUP_ID.fullmatch(value)):
        raise ValueError(
            f"{value!r} is not a Slack user id (U… or W…), user-group id (S…) or "
            "oncall:<name>; copy the id from the person's or the group's profile"
        )
    return value


def _channel_id(value: str) -> str:
    if not CHANNEL_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a Slack channel id (C…, G… or D…)")
    return value


def _bot_id(value: str) -> str:
    if not BOT_ID.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Slack bot id (B…) or app id (A…); the bot id is the `bot_id` "
            "of the integration's messages, the app id is on the app's settings page"
        )
    return value


def _directory(value: Any) -> Any:
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise ValueError(f'a directory is a path written as text, like "/srv/ops", not {value!r}')
    path = Path(value).expanduser()
    value = str(value)
    if not path.exists():
        raise ValueError(f"{value!r} does not exist; create it or name an existing directory")
    if not path.is_dir():
        raise ValueError(f"{value!r} is not a directory")
    return path.absolute()


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty; remove the key or write the text")
    return value.strip()


def unique(values: tuple[str, ...]) -> tuple[str, ...]:
    """A list key that names something twice is a typo, not a weight."""
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"lists {', '.join(map(repr, repeated))} more than once")
    return values


Duration = Annotated[timedelta, BeforeValidator(_duration)]
Directory = Annotated[Path, BeforeValidator(_directory)]
"""An existing directory; relative paths are from the directory the bot starts in."""
OutputLimit = Annotated[StrictInt, Field(gt=0)]
OsUser = Annotated[StrictStr, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")]
"""An OS user name as `useradd` takes it; whether it exists is checked when the tools are built."""
ApproverId = Annotated[StrictStr, AfterValidator(_approver_id)]
ChannelId = Annotated[StrictStr, AfterValidator(_channel_id)]
BotId = Annotated[StrictStr, AfterValidator(_bot_id)]
Approvals = Annotated[StrictInt, Field(ge=1)]
Concurrency = Annotated[StrictInt, Field(ge=1, le=1000)]
ToolName = Annotated[StrictStr, Field(min_length=1)]
Instructions = Annotated[StrictStr, AfterValidator(_text), Field(max_length=8000)]
AllowWindow = Annotated[timedelta, BeforeValidator(_duration), AfterValidator(_allow_window)]
"""`allow_for`: how long an allowance lasts, at least one second."""
RejectReason = Annotated[StrictStr, AfterValidator(_text), Field(max_length=75)]
"""One choice of the reject form (Slack shows at most 75 characters of an option)."""
SuggestedPrompt = Annotated[StrictStr, AfterValidator(_text), Field(max_length=200)]
"""One prompt the AI-app container offers when a conversation starts."""
MAX_SUGGESTED_PROMPTS = 4
"""Slack shows at most four suggested prompts."""
DEFAULT_REJECT_REASONS: tuple[str, ...] = (
    "Wrong target",
    "Too risky right now",
    "Not needed",
    "Needs a change window",
    "Do it another way",
)
"""What the reject form offers when `[defaults]` has no `reject_reasons`."""
Trigger = Literal["mention", "every_message"]
"""What starts a run in a channel: a mention of the bot, or every top-level message."""


def check_reachable(approvers: Sequence[str], required: int, key: str) -> None:
    """N approvals from fewer than N listed people (and no group) can never happen."""
    has_group = any(GROUP_ID.fullmatch(a) for a in approvers)
    if approvers and not has_group and required > len(approvers):
        raise ValueError(
            f"required_approvals = {required} but {key} lists only {len(approvers)} "
            "person(s) and no user group"
        )


# A tool call's arguments as the policy file speaks of them: `ArgumentRule` ("approval is
# needed when this argument matches this pattern") and `preview_args` (the arguments a tool's
# paired read-only preview tool is called with, built from the gated call's own).
#
# One model for the built-in tools' `[[tools.X.rules]]` and MCP tools'
# `[[mcp_servers.NAME.tools.TOOL.rules]]`, and one for `preview_args` in `[tools.NAME]` and
# `[mcp_servers.NAME.tools.TOOL]`. In `preview_args`, a value that is exactly `"{name}"` is the
# call's argument `name` as it is (any JSON type); a text with placeholders inside
# (`"web-{name}"`) gets their text; any other value is passed as written (tables and arrays are
# filled the same way, all the way down). A placeholder the call has no value for (nor a schema
# default) builds nothing: the preview fails saying which.

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
