"""Running a rule's preview: a read-only command whose output is shown on a card.

It is not a tool call: no approval, no ledger row of its own. It runs as the policy's `run_as`,
in `workdir`, with the same allowlisted environment as `run_command`, but as an argv (never through
a shell) and under its own, shorter bounds, so a slow or chatty preview cannot hold a card back.
The digest is the SHA-256 of the output as shown, and of the files the preview read when it
read any (below): the approval is bound to it.

The files a preview read are bound to the approval: read at preview time, checked before the
run (`read_inputs`, `changed_inputs`).

A preview shows what `kubectl apply -f web.yaml` would do with web.yaml as it was then; if the
file changes afterwards (by hand, or by an ungated sibling call of the same batch that runs
first), the approved call would apply something nobody saw. So each input is read when the
preview runs (before its command, so the output cannot be of a newer file than the digest):
the files the command names through its file options (bound even when absent) and every word
of the preview's argv that names a regular file. Right before the approved call runs, each is
read again; any difference, or one that can no longer be read, refuses the run.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from agent_core import Tool
from bot.errors import ToolEnvironmentError

from .command import RunAs, expand_variables, run_argv, tool_environment

__all__ = [
    "DIRECTORY_FILES",
    "INPUT_BYTES",
    "PREVIEW_OUTPUT_LIMIT",
    "PREVIEW_TIMEOUT",
    "BoundInput",
    "InputDigest",
    "PreviewResult",
    "bound_digest",
    "changed_inputs",
    "failed_preview",
    "preview_digest",
    "read_input",
    "read_inputs",
    "run_preview",
    "run_tool_preview",
    "unshown_inputs",
]

DIRECTORY_FILES = 2_000
"""The most files of one directory input (`-k dir`) that are read; more cannot be bound."""
INPUT_BYTES = 64 * 1024 * 1024
"""The most bytes of one input (a file, or a directory's files together) that are read; more
cannot be bound."""

State = Literal["file", "directory", "absent", "unreadable"]
_CHUNK = 1 << 20


class BoundInput(Protocol):
    """What the run compares: an input as stored with the call's preview."""

    @property
    def path(self) -> str: ...

    @property
    def resolved(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def digest(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class InputDigest:
    """One input as read: its path as written, the absolute path read, what was there, and the
    SHA-256 of its content (a directory: of its files' relative paths and digests)."""

    path: str
    resolved: str
    state: State
    digest: str | None
    why: str | None = None
    """Why it could not be read (`unreadable`: it cannot be bound, so the run refuses)."""


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _directory_digest(root: Path) -> str:
    """Every regular file under `root` (symbolic links followed to files, not to directories),
    sorted by relative path; `ValueError` past the bounds."""
    listing = hashlib.sha256()
    count = size = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder, name)
            if not path.is_file():
                continue
            count += 1
            size += path.stat().st_size
            if count > DIRECTORY_FILES or size > INPUT_BYTES:
                raise ValueError(f"more than {DIRECTORY_FILES} files or {INPUT_BYTES // 2**20} MiB")
            relative = path.relative_to(root).as_posix()
            listing.update(f"{_file_digest(path)}  {relative}\n".encode("utf-8", "surrogateescape"))
    return listing.hexdigest()


def read_input(path: str, workdir: Path) -> InputDigest:
    """Read one input now (relative paths from `workdir`, where the command runs)."""
    resolved = Path(workdir, path) if not os.path.isabs(path) else Path(path)
    where = os.path.normpath(resolved)
    try:
        if resolved.is_dir():
            return InputDigest(path, where, "directory", _directory_digest(resolved))
        if resolved.is_file():
            if resolved.stat().st_size > INPUT_BYTES:
                raise ValueError(f"larger than {INPUT_BYTES // 2**20} MiB")
            return InputDigest(path, where, "file", _file_digest(resolved))
        if not os.path.lexists(resolved):
            return InputDigest(path, where, "absent", None)
        why = "not a regular file or directory"
    except (OSError, ValueError) as exc:
        why = str(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
    return InputDigest(path, where, "unreadable", None, why)


def _words(argv: Sequence[str]) -> list[str]:
    """The words of a preview's argv after its program that may name a path (the value of a
    `--x=value` word; not an option)."""
    found: list[str] = []
    for word in argv[1:]:
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if value and not value.startswith("-"):
            found.append(value)
    return found


def _named_files(argv: Sequence[str], workdir: Path) -> list[str]:
    """What the preview template reads: its argv's words that name a regular file."""
    return [word for word in _words(argv) if Path(workdir, word).is_file()]


def unshown_inputs(
    inputs: Sequence[InputDigest], named: Iterable[str], argv: Sequence[str], workdir: Path
) -> list[str]:
    """The command's file operands (`named`) that the preview's argv does not name: the card
    cannot show what the command would do with them."""
    shown = {os.path.normpath(Path(workdir, word)) for word in _words(argv)}
    wanted = set(named)
    return [i.path for i in inputs if i.path in wanted and i.resolved not in shown]


def read_inputs(
    named: Iterable[str], argv: Sequence[str], workdir: Path
) -> tuple[InputDigest, ...]:
    """`named` (the command's file operands, bound even when absent) and the files the preview's
    argv names, each read once, in that order."""
    paths = dict.fromkeys([*named, *_named_files(argv, workdir)])
    return tuple(read_input(path, workdir) for path in paths)


def bound_digest(output_digest: str, inputs: Sequence[BoundInput]) -> str:
    """The preview's digest: of its output alone when it read no input, else of the output's
    digest and each input's (so a changed file is a changed preview: approvals reset)."""
    if not inputs:
        return output_digest
    lines = [output_digest, *(f"{i.state} {i.digest or '-'} {i.resolved}" for i in inputs)]
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def changed_inputs(bound: Sequence[BoundInput]) -> list[str]:
    """The paths (as written) of the inputs that are not as the preview read them now: a
    different content, gone, appeared, or not readable (then nothing can be checked)."""
    changed: list[str] = []
    for was in bound:
        now = read_input(was.resolved, Path("/"))
        if was.state == "unreadable" or (now.state, now.digest) != (was.state, was.digest):
            changed.append(was.path)
    return changed


PREVIEW_TIMEOUT = 10.0
"""Seconds a preview may run (or the tool's own `timeout`, when shorter)."""
PREVIEW_OUTPUT_LIMIT = 8_000
"""Characters kept of each of the preview's stdout and stderr."""


@dataclass(frozen=True, slots=True)
class PreviewResult:
    """What one preview run gave: the output shown, its exit status, why it failed (None: it
    did not), how long it took and the digest of the output."""

    output: str
    exit_status: int | None
    failed: str | None
    seconds: float
    digest: str
    inputs: tuple[InputDigest, ...] = ()
    """The files it read, with their digests (read before its command ran)."""


def preview_digest(output: str) -> str:
    return hashlib.sha256(output.encode("utf-8", "surrogatepass")).hexdigest()


def failed_preview(why: str, inputs: tuple[InputDigest, ...] = ()) -> PreviewResult:
    """A preview that could not be run at all (a placeholder without a value); the files the
    command reads are bound all the same (`inputs`)."""
    return PreviewResult(why, None, why, 0.0, bound_digest(preview_digest(why), inputs), inputs)


async def run_preview(
    argv: Sequence[str],
    *,
    workdir: Path,
    run_as: RunAs | None,
    timeout: float = PREVIEW_TIMEOUT,
    output_limit: int = PREVIEW_OUTPUT_LIMIT,
    env: Mapping[str, str] | None = None,
    inputs: Sequence[str] = (),
) -> PreviewResult:
    """Run `argv` once; a timeout, a non-zero exit or a program that cannot start is a failed
    preview (its output says what happened), never an exception. `env`: `run_command`'s own
    variables (`[tools.run_command] env`, `${VAR}` not yet filled in). `inputs`: the files
    the command reads (its file options), read and digested first with those `argv` names; one
    the argv does not name fails the preview (the card cannot show it)."""
    started = time.monotonic()
    read = await asyncio.to_thread(read_inputs, inputs, argv, workdir)
    try:
        own = expand_variables(env or {}, os.environ, where="tools.run_command.env")
    except ToolEnvironmentError as exc:
        return failed_preview(str(exc), read)
    child_env = tool_environment(own)
    if run_as is not None:
        child_env = run_as.environment(child_env)
    try:
        finished = await run_argv(
            argv,
            workdir=workdir,
            env=child_env,
            time_limit=timeout,
            output_limit=output_limit,
            run_as=run_as,
        )
    except OSError as exc:  # not found, not executable, no such workdir
        why = f"could not start {argv[0]!r}: {exc.strerror or exc}"
        return _result(why, None, why, started, read)
    output = finished.stdout
    if finished.stderr:
        output += ("\n" if output and not output.endswith("\n") else "") + finished.stderr
    failed = None
    if finished.timed_out:
        failed = f"timed out after {timeout:g}s"
    elif finished.returncode != 0:
        failed = f"exit status {finished.returncode}"
    elif unshown := unshown_inputs(read, inputs, argv, workdir):
        failed = f"it does not show {', '.join(map(repr, unshown))}, which the command reads"
    return _result(output, finished.returncode, failed, started, read)


def _result(
    output: str,
    exit_status: int | None,
    failed: str | None,
    started: float,
    inputs: tuple[InputDigest, ...],
) -> PreviewResult:
    seconds = time.monotonic() - started
    digest = bound_digest(preview_digest(output), inputs)
    return PreviewResult(output, exit_status, failed, seconds, digest, inputs)


async def run_tool_preview(
    tool: Tool,
    arguments: dict[str, Any],
    *,
    timeout: float = PREVIEW_TIMEOUT,
    output_limit: int = PREVIEW_OUTPUT_LIMIT,
) -> PreviewResult:
    """Call a custom or MCP tool's paired read-only tool once, under the preview's bounds; an
    error or a timeout is a failed preview (its output says what happened), never an
    exception. Its exit status is 0 when it answered, None when it did not."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            text = await tool.invoke(arguments)
    except TimeoutError:
        why = f"timed out after {timeout:g}s"
        return PreviewResult(why, None, why, time.monotonic() - started, preview_digest(why))
    except Exception as exc:  # a tool's failure is what the card shows, never a crash
        why = f"{tool.name} failed: {exc}"
        return PreviewResult(why, None, why, time.monotonic() - started, preview_digest(why))
    if len(text) > output_limit:
        text = text[:output_limit] + f"\n… ({len(text) - output_limit} more characters cut)"
    return PreviewResult(text, 0, None, time.monotonic() - started, preview_digest(text))
