"""Reading the terminal's lines in a thread of their own, so that Ctrl-C ends `opsgate chat` at
once and stdout stays blocking.

A terminal's stdin and stdout are one open file: its status flags are shared. Watching stdin
from the event loop (`connect_read_pipe`) sets O_NONBLOCK on it, and so on stdout too; long
output then fails part-way with EAGAIN, which a terminal shows as lines that never came. So a
daemon thread reads the raw descriptor with plain blocking `os.read` (no buffered reader whose
lock could stay held at exit) and hands lines to the loop. On Ctrl-C the prompt's await is
cancelled; the thread, blocked in `read`, ends with the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TextIO

__all__ = ["Ask", "stdin_prompt"]

Ask = Callable[[str], Awaitable[str | None]]
"""Show a prompt, return the line typed (without its newline), None at end of input."""


@contextlib.asynccontextmanager
async def stdin_prompt(out: TextIO) -> AsyncIterator[Ask]:
    """An `Ask` on this process's stdin, printing prompts to `out`."""
    fd = sys.stdin.fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)):
        # A regular file (`opsgate chat < script`): reads never block, no reader needed.
        async def ask_file(prompt: str) -> str | None:
            print(prompt, end="", file=out, flush=True)
            line = sys.stdin.readline()
            return line.rstrip("\n") if line else None

        yield ask_file
        return

    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    reader = threading.Thread(
        target=_read_lines, args=(fd, loop, lines), name="stdin reader", daemon=True
    )
    reader.start()

    async def ask(prompt: str) -> str | None:
        print(prompt, end="", file=out, flush=True)
        return await lines.get()

    yield ask


def _read_lines(fd: int, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
    """The reader thread: whole lines (without their newline) into `lines`, then None."""
    pending = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            if pending:
                _hand(loop, lines, pending.decode(errors="replace"))
            _hand(loop, lines, None)
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            _hand(loop, lines, line.decode(errors="replace").rstrip("\r"))


def _hand(
    loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None], line: str | None
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is asking any more
        loop.call_soon_threadsafe(lines.put_nowait, line)
