"""A process SIGKILLed in the middle of writes leaves a sound database with every committed turn.

A real child process (`tests/support/store_crash_child.py`) appends turns in a loop and reports
each commit on stdout; the parent kills it once it has reported enough, several times over.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
from pathlib import Path

from bot.store import SQLiteStore
from tests.support.store_crash_child import MESSAGES_PER_TURN, turn

ROOT = Path(__file__).resolve().parents[2]


async def run_child_until_killed(db: Path, at_least: int) -> int:
    """Start a child, SIGKILL it once it reports turn `at_least` committed; the last it reported."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.store_crash_child",
        str(db),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    last = -1
    try:
        while last < at_least:
            line = await asyncio.wait_for(child.stdout.readline(), timeout=60)
            assert line, f"the child exited early with status {await child.wait()}"
            last = int(line.split()[1])
        child.send_signal(signal.SIGKILL)  # mid-loop: it is busy writing the next turn
        assert await asyncio.wait_for(child.wait(), timeout=30) == -signal.SIGKILL
        # Lines the child wrote before it died are still in the pipe: they were committed too.
        for line in (await child.stdout.read()).splitlines():
            last = int(line.split()[1])
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    return last


async def test_sigkill_mid_write_keeps_the_database_sound_and_every_commit(
    tmp_path: Path,
) -> None:
    db = tmp_path / "crash.db"
    reported = -1
    for target in (40, 120, 200):
        reported = await run_child_until_killed(db, target)
        assert reported >= target

        raw = sqlite3.connect(db)
        try:
            assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            raw.close()

        async with SQLiteStore(db) as store:
            session = await store.find_session("T1", "C1", "crash")
            assert session is not None
            history = await store.load_messages(session.id)
        complete, partial = divmod(len(history), MESSAGES_PER_TURN)
        assert partial == 0, "a turn was committed in part"
        assert complete > reported, f"turn {reported} was reported committed but is missing"
        assert history == [m for n in range(complete) for m in turn(n)]
