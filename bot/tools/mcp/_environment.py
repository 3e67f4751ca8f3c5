"""The environment a stdio MCP server starts with: its own `env` and a few harmless basics.

The bot's environment holds its secrets (SLACK_*, OPENAI_*, whatever `.env` loaded), so a server
inherits nothing but `INHERITED`. The SDK would add its own defaults too; we pass a complete
mapping so the set is ours, and tests assert it.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["INHERITED", "server_environment"]

INHERITED = ("HOME", "LANG", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""Names copied from the bot's environment when set; every other variable stays behind."""


def server_environment(own: Mapping[str, str], parent: Mapping[str, str]) -> dict[str, str]:
    """`own` (already `${VAR}`-expanded) over the inherited basics taken from `parent`.

    A value starting with "()" is an exported shell function: never passed on.
    """
    basics = {
        name: parent[name]
        for name in INHERITED
        if name in parent and not parent[name].startswith("()")
    }
    return basics | dict(own)
