"""`run_command`: a shell command run for the model, in a fenced-off child process.

The command text comes from the model, so the child gets no secrets (an allowlisted environment,
below: the basics and the tool's own `env`), a time limit enforced on its whole
process group (a shell's background children die with it), and a cap on the output that is
kept, so a chatty command cannot flood the model's context or the bot's memory.
`protect_process_environment` keeps the child from reading the secrets out of the bot's own
`/proc/<pid>/environ` instead. The text runs as it was judged, byte for byte: `bash -c TEXT`
(below), never re-quoted or rebuilt from parsed words.

Commands run under bash, named by its path and checked at start-up (`checked_shell`). The policy
judges a command by parsing it as bash (tree-sitter-bash), so the text must run under bash, not
whatever `/bin/sh` is on the host (dash, busybox ash): two shells read some texts differently,
and then what runs is not what was judged. The path is fixed, not looked up on a `PATH` someone
could change, and a host without it stops the bot at start-up (and `opsgate check`) naming the
path, rather than failing every command later.

The fence is this module's: the environment a tool process starts with (`tool_environment`, also
used by previews and stdio MCP servers) and the OS user `run_command`'s children run as
(`RunAs`) are kept here with the child they fence, each in its own section below.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import ctypes
import logging
import os
import pwd
import re
import signal
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from agent_core import FunctionTool, ToolError, ToolTimeout, tool
from bot.errors import BotError, RunAsError, ShellMissing, ToolEnvironmentError

__all__ = [
    "BASE_NAMES",
    "BASE_PREFIXES",
    "BASH",
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_TIMEOUT",
    "Finished",
    "RunAs",
    "base_environment",
    "checked_shell",
    "expand_variables",
    "make_run_command",
    "privilege_warnings",
    "protect_process_environment",
    "resolve_run_as",
    "run_argv",
    "tool_environment",
]

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


logger = logging.getLogger("bot.tools.command")

DEFAULT_TIMEOUT = 60.0
"""Seconds a command may run unless the policy's `[tools.run_command] timeout` says otherwise."""
DEFAULT_OUTPUT_LIMIT = 20_000
"""Characters kept of each of stdout and stderr unless the policy's `output_limit` says so."""

_PR_SET_DUMPABLE = 4

_READ_CHUNK = 65_536
_GRACE_SECONDS = 5.0
"""How long to wait for a killed process group to let go of its pipes before giving up on them."""


def protect_process_environment() -> bool:
    """Make this process non-dumpable, so that processes of the same user cannot read its memory
    or `/proc/<pid>/environ` (where the bot's tokens are) or attach a debugger to it.

    Without `run_as`, `run_command`'s children run as the bot's user; without this, `cat
    /proc/$PPID/environ` or similar would hand them every secret the allowlisted environment
    left out (with `run_as`, see `RunAs` below, they run as another user and cannot read it anyway).
    Call it first thing at start-up of the service. It is effective only when the bot runs as a
    dedicated non-root user: root (any process with CAP_SYS_PTRACE) reads non-dumpable processes
    anyway. It also turns off core dumps of the bot. Children are not affected (exec resets it).

    Linux only: returns True once the flag is set, False elsewhere or if prctl failed (logged
    at debug level).
    """
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError) as exc:
        logger.debug("cannot mark the process non-dumpable: no prctl (%s)", exc)
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    if prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        logger.debug("prctl(PR_SET_DUMPABLE, 0) failed: %s", os.strerror(error))
        return False
    return True


class _Capture:
    """Keeps the head and the tail of a stream up to `limit` characters, and counts the rest."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit - limit // 2
        self._tail_limit = limit // 2
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self._total = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _add(self, text: str) -> None:
        self._total += len(text)
        room = self._head_limit - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if text and self._tail_limit:
            self._tail = (self._tail + text)[-self._tail_limit :]

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_READ_CHUNK):
            self._add(self._decoder.decode(chunk))
        self._add(self._decoder.decode(b"", final=True))

    def text(self) -> str:
        head = "".join(self._head)
        cut = self._total - self._head_len - len(self._tail)
        if cut <= 0:
            return head + self._tail
        return f"{head}\n[... {cut} characters cut ...]\n{self._tail}"


def _kill_group(pid: int) -> None:
    # The group id is the shell's pid (start_new_session=True made it a session leader); Linux
    # does not hand that pid to a new process while the group still has members.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _report(finished: Finished, time_limit: float) -> str:
    returncode = finished.returncode
    if finished.timed_out:
        status = f"timed out after {time_limit:g}s; the process group was killed"
    elif returncode is not None and returncode < 0:
        status = f"killed by signal {-returncode}"
    else:
        status = f"exit code: {returncode}"
    return f"{status}\n--- stdout ---\n{finished.stdout}\n--- stderr ---\n{finished.stderr}"


async def _settle(proc: asyncio.subprocess.Process, tasks: Collection[asyncio.Task[Any]]) -> None:
    """After the group was killed: let the pipes reach EOF and the shell be reaped, so the
    subprocess transport closes itself. What is still open after a grace period belongs to
    something that escaped the group: stop reading and close the transport ourselves."""
    try:
        await asyncio.wait(tasks, timeout=_GRACE_SECONDS)
    finally:
        leftover = [task for task in tasks if not task.done()]
        for task in leftover:
            task.cancel()
        if leftover:
            transport = getattr(proc, "_transport", None)  # Process has no public close()
            if transport is not None:
                transport.close()
            await asyncio.gather(*leftover, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Finished:
    """How a child ended: its exit status (negative: a signal), whether it was killed at its
    time limit, and what it wrote (head and tail kept, the middle cut)."""

    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str


async def run_argv(
    argv: Sequence[str],
    *,
    workdir: Path,
    env: dict[str, str],
    time_limit: float,
    output_limit: int,
    run_as: RunAs | None,
) -> Finished:
    """Run `argv` (no shell unless it is one) in its own process group, fenced as the module
    docstring says; `run_command` runs `bash -c`, a rule's preview its argv as built."""
    spawn = run_as.spawn_options() if run_as is not None else {}
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=workdir,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        **spawn,
    )
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = _Capture(output_limit), _Capture(output_limit)
    # Done means the shell exited AND every process holding its output let go: a background
    # child still writing to our pipe is part of the command.
    tasks = {
        asyncio.create_task(proc.wait()),
        asyncio.create_task(stdout.drain(proc.stdout)),
        asyncio.create_task(stderr.drain(proc.stderr)),
    }
    try:
        _, pending = await asyncio.wait(tasks, timeout=time_limit)
    except BaseException:  # cancelled (or worse): nothing of the command may outlive us
        _kill_group(proc.pid)
        await _settle(proc, tasks)
        raise
    timed_out = bool(pending)
    if timed_out:
        _kill_group(proc.pid)
        await _settle(proc, tasks)
    await asyncio.gather(*tasks, return_exceptions=True)
    return Finished(proc.returncode, timed_out, stdout.text(), stderr.text())


def make_run_command(
    *,
    workdir: Path,
    timeout: float = DEFAULT_TIMEOUT,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    env: Mapping[str, str] | None = None,
    run_as: RunAs | None = None,
    shell: Path | None = None,
) -> FunctionTool:
    """Build the `run_command` tool (approval required unless the policy says otherwise).

    The child's environment is the allowlisted basics of this process's environment (read at
    each call) and `env`, the policy's `[tools.run_command] env` (`${VAR}` filled in from this
    process's environment now, at start-up: a missing one is an error naming it). `timeout` is
    the longest a command may run, in seconds; the model may ask for less with
    `timeout_seconds`, never more. `output_limit` is the number of characters kept of each of
    stdout and stderr (the head and the tail; the middle is cut). `run_as` is the OS user the
    child runs as, with that user's HOME (default: the bot's user). `shell` must be bash
    (default `BASH`; `ShellMissing` naming it when it is not there).
    """
    if timeout <= 0:
        raise ValueError(f"run_command timeout must be positive, not {timeout!r}")
    if output_limit < 1:
        raise ValueError(f"run_command output_limit must be at least 1, not {output_limit!r}")
    workdir = Path(workdir)
    shell = checked_shell(shell or BASH)
    own = expand_variables(env or {}, os.environ, where="tools.run_command.env")
    max_timeout = timeout

    description = (
        "Run a shell command (bash -c) on the operations host and return its exit code, "
        "stdout and stderr; long output is cut in the middle. A human may have to approve the "
        f"call first. Commands are stopped after {max_timeout:g} seconds at most."
    )

    @tool(name="run_command", description=description, requires_approval=True)
    async def run_command(
        command: Annotated[str, Field(description="The shell command.")],
        timeout_seconds: Annotated[
            float | None, Field(gt=0, description="A shorter time limit, in seconds.")
        ] = None,
    ) -> str:
        if not workdir.is_dir():
            raise ToolError(f"the working directory {str(workdir)!r} does not exist")
        limit = max_timeout if timeout_seconds is None else min(timeout_seconds, max_timeout)
        child_env = tool_environment(own)
        if run_as is not None:
            child_env = run_as.environment(child_env)
        finished = await run_argv(
            (str(shell), "-c", command),  # the judged text itself: never rebuilt from words
            workdir=workdir,
            env=child_env,
            time_limit=limit,
            output_limit=output_limit,
            run_as=run_as,
        )
        report = _report(finished, limit)
        if finished.timed_out:  # the model reads the report all the same, as an error result
            raise ToolTimeout(report, limit)
        return report

    return run_command


# The environment a tool process starts with: an allowlist, never the bot's own environment.
#
# The bot's environment holds its secrets and those of everything beside it (`SLACK_*`,
# `OPENAI_*`, `OPSGATE_*`, the OpenTelemetry exporter's headers, a pager's key, whatever a
# deployment exported), and `printenv` may be free under a policy. So a child gets only the
# basics a program needs to behave (`BASE_NAMES`, `LC_*`) and the variables its own `env`
# configuration names, nothing else: a secret the bot gains later stays out without anyone
# listing it. `run_command`, its previews and stdio MCP servers all start this way.

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


# Privilege separation for `run_command`: `run_as` under `[tools.run_command]` in the policy.
#
# A command the bot runs as itself can read `.env` and rewrite the bot's database (approve other
# calls, drop the audit trigger, delete rows): approvals mean nothing then. With `run_as`, each
# child runs as that OS user (its uid and primary group, no supplementary groups, its HOME), so the
# bot's own files (owned by the bot's user, mode 600) are out of the command's reach. Switching
# users needs root or the capabilities CAP_SETUID, CAP_SETGID and CAP_KILL (to stop a command that
# runs too long); a bot that has neither refuses to start rather than run commands as itself.

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
