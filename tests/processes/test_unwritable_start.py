"""`opsgate run` on a database that does not take writes stops at once with one line and status
2: serving would answer Slack 200 and lose every message and click."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.store import SQLiteStore
from tests.processes.test_cli import SLACK_AND_LLM, _opsgate

_SHM = 32768
"""What SQLite's `-shm` file takes when the bot opens the file: left free, so the open works
and the first write is what fails."""


async def _created(db: Path) -> None:
    async with SQLiteStore(db, exclusive=True):
        pass


@contextlib.contextmanager
def _full_disk() -> Iterator[Path]:
    """A database on a small tmpfs filled up to what opening it needs (root only)."""
    mount_point = Path(tempfile.mkdtemp(prefix="opsgate-full-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        mount_point.rmdir()
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
        mount_point.rmdir()


def _fill(directory: Path, *, leave: int) -> None:
    stat = os.statvfs(directory)
    free = stat.f_bavail * stat.f_frsize
    (directory / "filler").write_bytes(b"\0" * (free - leave))
    stat = os.statvfs(directory)
    assert stat.f_bavail * stat.f_frsize == leave


async def test_run_refuses_a_database_that_does_not_take_writes(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        if os.geteuid() == 0:  # root writes any file: a full disk, then
            directory = stack.enter_context(_full_disk())
            db = directory / "opsgate.db"
            await _created(db)
            _fill(directory, leave=_SHM)
        else:  # a read-only file in a writable directory: SQLite opens it read-only
            db = tmp_path / "opsgate.db"
            await _created(db)
            db.chmod(0o444)
        result = _opsgate(["run"], cwd=tmp_path, env={**SLACK_AND_LLM, "OPSGATE_DB": str(db)})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("opsgate: the database does not take writes")
    assert str(db) in lines[0]
