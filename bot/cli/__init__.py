"""The `opsgate` command: `run` the bot, `check` the set-up, print the `audit` log, `chat` in a
terminal.

Each command has its own module (`check`, `audit`, `chat`, `policy`, `replay`, `report`); the
commands that are one call each (`run`, `migrate`, `mcp tools`) are in `_main`, which
also parses the command line and turns the errors a person can fix (settings, policy,
database) into one line and exit status 2.
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
