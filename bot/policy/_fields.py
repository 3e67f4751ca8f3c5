"""The value types of the policy file: Slack ids, durations, directories, patterns.

Each validator says what it expected in words a person editing the file can act on; the message
ends up after the key's name in `PolicyError` (see `_load.explain`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, StrictInt, StrictStr

from bot.words import parse_duration

from ._arguments import Regex

__all__ = [
    "DEFAULT_REJECT_REASONS",
    "GROUP_ID",
    "AllowWindow",
    "Approvals",
    "ApproverId",
    "BotId",
    "ChannelId",
    "Concurrency",
    "Directory",
    "Duration",
    "Instructions",
    "OsUser",
    "OutputLimit",
    "Regex",
    "RejectReason",
    "ToolName",
    "Trigger",
    "check_reachable",
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
