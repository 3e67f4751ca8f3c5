"""The `opsgate` command: `run` the bot, `check` the set-up, print the `audit` log, `chat` in a
terminal.

Each command has its own module (`check`, `audit`, `migrate`, `chat`; `run` is in `_main`);
`_main` parses the command line and turns the errors a person can fix (settings, policy,
database) into one line and exit status 2.
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
