"""The environment a tool process starts with: an allowlist, never the bot's own environment.

The bot's environment holds its secrets and those of everything beside it (`SLACK_*`,
`OPENAI_*`, `OPSGATE_*`, the OpenTelemetry exporter's headers, a pager's key, whatever a
deployment exported), and `printenv` may be free under a policy. So a child gets only the
basics a program needs to behave (`BASE_NAMES`, `LC_*`) and the variables its own `env`
configuration names, nothing else: a secret the bot gains later stays out without anyone
listing it. `run_command`, its previews and stdio MCP servers all start this way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from bot.errors import ToolEnvironmentError

from ..errors import BotError

__all__ = [
    "BASE_NAMES",
    "BASE_PREFIXES",
    "base_environment",
    "expand_variables",
    "tool_environment",
]

BASE_NAMES = ("HOME", "LANG", "PATH", "TERM", "TZ")
"""Names copied from the bot's environment when set."""
BASE_PREFIXES = ("LC_",)
"""Prefixes of names copied from the bot's environment (the locale's categories)."""

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _passed(name: str, value: str) -> bool:
    # A value starting with "()" is an exported shell function: never passed on.
    return (name in BASE_NAMES or name.startswith(BASE_PREFIXES)) and not value.startswith("()")


def base_environment(parent: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted basics of `parent` (`BASE_NAMES`, `LC_*`)."""
    return {name: value for name, value in parent.items() if _passed(name, value)}


def expand_variables(
    values: Mapping[str, str],
    environ: Mapping[str, str],
    *,
    where: str,
    error: type[BotError] = ToolEnvironmentError,
) -> dict[str, str]:
    """`values` with every `${VAR}` replaced from `environ`; a missing one is an `error`
    naming it and `where` (e.g. "tools.run_command.env"). Never shows a value."""
    expanded: dict[str, str] = {}
    for key, value in values.items():

        def lookup(match: re.Match[str], key: str = key) -> str:
            name = match.group(1)
            if name not in environ:
                raise error(
                    f"{where}.{key} uses ${{{name}}}, but {name} is not set in the bot's "
                    "environment"
                )
            return environ[name]

        expanded[key] = _VARIABLE.sub(lookup, value)
    return expanded


def tool_environment(
    own: Mapping[str, str], parent: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A child's whole environment: `own` (already `${VAR}`-expanded) over the basics of
    `parent` (default: this process's environment, read now)."""
    return base_environment(os.environ if parent is None else parent) | dict(own)
