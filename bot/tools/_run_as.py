"""Privilege separation for `run_command`: `run_as` under `[tools.run_command]` in the policy.

A command the bot runs as itself can read `.env` and rewrite the bot's database (approve other
calls, drop the audit trigger, delete rows): approvals mean nothing then. With `run_as`, each child
runs as that OS user (its uid and primary group, no supplementary groups, its HOME), so the bot's
own files (owned by the bot's user, mode 600) are out of the command's reach. Switching users
needs root or the capabilities CAP_SETUID, CAP_SETGID and CAP_KILL (to stop a command that runs
too long); a bot that has neither refuses to start rather than run commands as itself.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.errors import RunAsError

__all__ = ["RunAs", "privilege_warnings", "resolve_run_as"]


_CAP_KILL, _CAP_SETGID, _CAP_SETUID = 5, 6, 7
_SWITCH_CAPABILITIES = (1 << _CAP_KILL) | (1 << _CAP_SETGID) | (1 << _CAP_SETUID)
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4


@dataclass(frozen=True, slots=True)
class RunAs:
    """The OS user `run_command`'s children run as."""

    name: str
    uid: int
    gid: int
    home: str

    @property
    def is_self(self) -> bool:
        """The bot's own user: nothing to switch (and `setgroups` would need a privilege)."""
        return self.uid == os.geteuid()

    def spawn_options(self) -> dict[str, Any]:
        """Keyword arguments for `asyncio.create_subprocess_exec` that start the child as us."""
        if self.is_self:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` (already free of secrets) with this user's HOME and names."""
        return {**base, "HOME": self.home, "USER": self.name, "LOGNAME": self.name}


def _effective_capabilities() -> int | None:
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return None


def _clear_ambient_capabilities() -> None:
    """A non-root bot given its capabilities as *ambient* ones (systemd `AmbientCapabilities=`)
    would pass them on through exec to the very child that was meant to have none, and it could
    switch back to the bot's user. Clearing the ambient set keeps the bot's own (permitted)
    capabilities and lets the child start with nothing."""
    if sys.platform != "linux" or os.geteuid() == 0:
        return  # root's children lose every capability when they leave uid 0
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise RunAsError(f"cannot clear the bot's ambient capabilities: {os.strerror(error)}")


def _can_switch_users() -> bool:
    capabilities = _effective_capabilities()
    if capabilities is None:
        return os.geteuid() == 0
    return capabilities & _SWITCH_CAPABILITIES == _SWITCH_CAPABILITIES


def resolve_run_as(name: str) -> RunAs:
    """Look the user up now (at start-up), so a typo stops the bot instead of every command."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise RunAsError(
            f"tools.run_command.run_as: there is no OS user {name!r} on this host; create it "
            f"(useradd --system --no-create-home {name}) or name an existing user"
        ) from None
    run_as = RunAs(name=name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir or "/")
    if not run_as.is_self and not _can_switch_users():
        raise RunAsError(
            f"tools.run_command.run_as = {name!r}: the bot cannot start commands as another "
            "user; run it as root or give it the capabilities CAP_SETUID, CAP_SETGID and CAP_KILL"
        )
    if not run_as.is_self:
        _clear_ambient_capabilities()
    return run_as


def privilege_warnings(run_as: RunAs | None, workdir: Path, database: Path | None) -> list[str]:
    """What `opsgate check` warns about: commands that could reach the bot's own files."""
    warnings: list[str] = []
    me = pwd.getpwuid(os.geteuid()).pw_name
    if run_as is None or run_as.is_self:
        warnings.append(
            f"run_command: commands run as the bot's own user {me!r} and can read .env and change "
            "the database (approvals included); set run_as under [tools.run_command]"
        )
    if run_as is not None and run_as.uid == 0:
        warnings.append(
            f"run_command: commands run as root ({run_as.name!r}); set run_as to an unprivileged "
            "user"
        )
    workdir = workdir.resolve()
    own = {Path.cwd().resolve(): "the bot's working directory"}
    if database is not None:
        own.setdefault(database.resolve().parent, "the directory of the bot's database")
    for directory, what in own.items():
        if workdir == directory:
            warnings.append(
                f"run_command: workdir {str(workdir)!r} is {what}; give commands a directory "
                "of their own"
            )
    return warnings
