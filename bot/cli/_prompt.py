"""Reading the terminal's lines without a blocking thread, so Ctrl-C ends `opsgate chat` at once.

`input()` in a worker thread (what `asyncio.to_thread` gives) cannot be interrupted: on Ctrl-C
`asyncio.run` cancels the main task, then waits for the thread, which waits for Enter. Here the
loop itself watches stdin (a pipe or a terminal), so a cancelled prompt is just a cancelled read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
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
        # A regular file (`opsgate chat < script`): reads never block, no watcher needed.
        async def ask_file(prompt: str) -> str | None:
            print(prompt, end="", file=out, flush=True)
            line = sys.stdin.readline()
            return line.rstrip("\n") if line else None

        yield ask_file
        return

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    was_blocking = os.get_blocking(fd)
    # A duplicate, so that closing the transport leaves the process's own stdin open.
    pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)

    async def ask(prompt: str) -> str | None:
        print(prompt, end="", file=out, flush=True)
        line = await reader.readline()
        return line.decode(errors="replace").rstrip("\r\n") if line else None

    try:
        yield ask
    finally:
        transport.close()
        # The terminal is shared with the shell: leave it blocking, as we found it.
        os.set_blocking(fd, was_blocking)
