"""The environment a stdio MCP server starts with: its own `env` and the allowlisted basics.

The bot's environment holds its secrets (SLACK_*, OPENAI_*, OTEL_*, whatever `.env` loaded) and
the other servers' `env`, so a server inherits nothing but `bot.tools.environment`'s basics
(`PATH`, `HOME`, `LANG`, `LC_*`, `TZ`, `TERM`). The SDK's `stdio_client` merges its own
defaults (`USER`, `LOGNAME`, `SHELL`, …) over the mapping it is given, so the server is started
through `env -u NAME…` for each of those we do not pass: the set is ours, and tests assert it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence

from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

from bot.errors import McpConfigError

from ..environment import BASE_NAMES, tool_environment
from ..environment import expand_variables as expand

__all__ = ["ENV_PROGRAM", "INHERITED", "expand_variables", "server_command", "server_environment"]

INHERITED = BASE_NAMES
"""Names copied from the bot's environment when set (and `LC_*`); every other variable stays
behind."""

ENV_PROGRAM = "/usr/bin/env"
"""Starts the server with the SDK's additions unset (names only: no value on a command line)."""


def server_environment(own: Mapping[str, str], parent: Mapping[str, str]) -> dict[str, str]:
    """`own` (already `${VAR}`-expanded) over the inherited basics taken from `parent`."""
    return tool_environment(own, parent)


def server_command(
    command: str, args: Sequence[str], environment: Mapping[str, str]
) -> tuple[str, list[str]]:
    """The program and arguments that start `command args` with exactly `environment`, once the
    SDK has merged its defaults into it. `FileNotFoundError` when `command` is not found (on
    the server's `PATH`), as starting it directly would raise."""
    added = sorted(set(DEFAULT_INHERITED_ENV_VARS) - set(environment))
    if not added:
        return command, list(args)
    found = shutil.which(command, path=environment.get("PATH"))
    if found is None:
        raise FileNotFoundError(command)
    unset = [word for name in added for word in ("-u", name)]
    return ENV_PROGRAM, [*unset, "--", found, *args]


def expand_variables(
    values: Mapping[str, str], environ: Mapping[str, str], *, where: str
) -> dict[str, str]:
    """`values` with every `${VAR}` replaced from `environ`; a missing one is an error naming
    it and `where` (e.g. "mcp_servers.github.headers.Authorization"). Never shows a value."""
    return expand(values, environ, where=where, error=McpConfigError)
