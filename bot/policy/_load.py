"""Reading the policy file, and turning pydantic's errors into one message a person can act on.

Every problem names the key it is about (`tools.run_command.rules[0].pattern`), and an unknown
key comes with the nearest known one, because most mistakes in a hand-written file are typos.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from bot.errors import PolicyError

from ._mcp import McpServerConfig, McpToolOverride
from ._model import (
    RUN_COMMAND_ONLY,
    ArgumentRule,
    ChannelPolicy,
    Defaults,
    FreezeSpec,
    PlaneClient,
    PlanePolicy,
    Rule,
    ToolPolicy,
)
from ._rules import NEEDS_MATCH

__all__ = ["did_you_mean", "explain", "parse_toml", "read_policy_file"]


def read_policy_file(path: Path) -> str:
    """The file's text; `PolicyError` naming the file if it is missing or unreadable."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(f"policy file {path}: not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"policy file {path}: cannot be read: {exc}") from None


def parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy file {source}: invalid TOML: {exc}") from None


def did_you_mean(word: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def explain(source: str, exc: ValidationError, root: type[BaseModel]) -> str:
    """The `PolicyError` message for a file that failed validation against `root` (`Policy`)."""
    problems = [_problem(error, root) for error in exc.errors()]
    if len(problems) == 1:
        return f"policy file {source}: {problems[0]}"
    listed = "\n".join(f"  - {p}" for p in problems)
    return f"policy file {source}: {len(problems)} problems:\n{listed}"


def _problem(error: Any, root: type[BaseModel]) -> str:
    loc = tuple(error["loc"])
    key = _key_path(loc)
    if error["type"] == "extra_forbidden":
        section = _section(loc, root)
        choices = set(section.model_fields) if section else set()
        if section is ToolPolicy and loc[1] != "run_command":
            choices -= set(RUN_COMMAND_ONLY)
        return f"unknown key {key!r}{did_you_mean(str(loc[-1]), sorted(choices))}"
    if error["type"] == "missing":
        return f"missing key {key!r}"
    if error["type"] == NEEDS_MATCH:
        return f"missing key {key + '.argument'!r} (or `prefix`, for run_command)"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{key}: {message}" if key else message


def _section(loc: tuple[int | str, ...], root: type[BaseModel]) -> type[BaseModel] | None:
    shape = [part if isinstance(part, int) else str(part) for part in loc[:-1]]
    match shape:
        case []:
            return root
        case ["defaults"]:
            return Defaults
        case ["tools", _]:
            return ToolPolicy
        case ["tools", _, "rules", int()]:
            return Rule
        case ["channels_policy", _]:
            return ChannelPolicy
        case ["freezes", int()]:
            return FreezeSpec
        case ["plane"]:
            return PlanePolicy
        case ["plane", "clients", _]:
            return PlaneClient
        case ["mcp_servers", _]:
            return McpServerConfig
        case ["mcp_servers", _, "tools", _]:
            return McpToolOverride
        case ["mcp_servers", _, "tools", _, "rules", int()]:
            return ArgumentRule
    return None


def _key_path(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for a problem with a dict key, named before it
            continue
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
