"""The shell `run_command` runs commands with: bash, named by its path and checked at start-up.

The policy judges a command by parsing it as bash (tree-sitter-bash), so the text must run under
bash, not whatever `/bin/sh` is on the host (dash, busybox ash): two shells read some texts
differently, and then what runs is not what was judged. The path is fixed, not looked up on a
`PATH` someone could change, and a host without it stops the bot at start-up (and `opsgate
check`) naming the path, rather than failing every command later.
"""

from __future__ import annotations

import os
from pathlib import Path

from bot.errors import ShellMissing

__all__ = ["BASH", "checked_shell"]

BASH = Path("/bin/bash")
"""The shell every `run_command` command runs under, as `bash -c <command text>`."""


def checked_shell(path: Path = BASH) -> Path:
    """`path` if it is an executable file; `ShellMissing` naming it otherwise."""
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ShellMissing(
            f"run_command runs commands with {str(path)!r} (the policy judges them as bash), "
            "and there is no executable file there; install bash"
        )
    return path
