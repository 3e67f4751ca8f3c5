"""Running a rule's preview: a read-only command whose output is shown on a card.

It is not a tool call: no approval, no ledger row of its own. It runs as the policy's `run_as`,
in `workdir`, with the same allowlisted environment as `run_command`, but as an argv (never through
a shell) and under its own, shorter bounds, so a slow or chatty preview cannot hold a card back.
The digest is the SHA-256 of the output as shown, and of the files the preview read when it
read any (`bot.tools.preview_inputs`): the approval is bound to it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core import Tool
from bot.errors import ToolEnvironmentError

from ._run_as import RunAs
from .command import run_argv
from .environment import expand_variables, tool_environment
from .preview_inputs import InputDigest, bound_digest, read_inputs, unshown_inputs

__all__ = [
    "PREVIEW_OUTPUT_LIMIT",
    "PREVIEW_TIMEOUT",
    "PreviewResult",
    "failed_preview",
    "preview_digest",
    "run_preview",
    "run_tool_preview",
]

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
