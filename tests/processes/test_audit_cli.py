"""`opsgate audit verify` and `opsgate audit --follow` as the real console script, on a real
SQLite file and a real PostgreSQL database, with rows written by other processes."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.llm_server import LLMStandIn
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.slack_api import SlackAPIStandIn

__all__ = ["postgres_cluster", "postgres_url"]

ROOT = Path(__file__).resolve().parents[2]
OPSGATE = Path(sys.executable).with_name("opsgate")

_WRITER = """
import asyncio, sys
from bot.store import open_store

async def main(target, actor, count):
    async with open_store(target) as store:
        for n in range(count):
            await store.audit("request", actor=actor, details={"n": n, "text": "héllo"})

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def _environment(**env: str) -> dict[str, str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "OPSGATE_"))
    }
    return {**base, "PYTHONPATH": str(ROOT), **env}


async def _write(db: str, actor: str, count: int, **env: str) -> None:
    """Audit rows written by another process."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WRITER, db, actor, str(count), env=_environment(**env)
    )
    assert await asyncio.wait_for(child.wait(), 60) == 0


def _opsgate(db: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(OPSGATE), *args],
        env=_environment(OPSGATE_DB=db, **env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(params=["postgresql", "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """OPSGATE_DB for the test: a file path or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "opsgate.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


async def _tamper(db: str, statement: str) -> None:
    if not db.startswith("postgres"):
        conn = sqlite3.connect(db)
        with conn:
            conn.execute("DROP TRIGGER IF EXISTS audit_no_update")
            conn.execute("DROP TRIGGER IF EXISTS audit_no_delete")
            conn.execute(statement)
        conn.close()
        return
    import asyncpg

    conn = await asyncpg.connect(db)
    try:
        await conn.execute("ALTER TABLE audit DISABLE TRIGGER USER")
        await conn.execute(statement)
    finally:
        await conn.close()


async def test_verify_passes_then_names_the_edited_row(database: str) -> None:
    await _write(database, "U0ALICE", 4)
    ok = await asyncio.to_thread(_opsgate, database, "audit", "verify")
    rows = [json.loads(line) for line in _opsgate(database, "audit", "--json").stdout.splitlines()]
    assert [row["seq"] for row in rows] == [1, 2, 3, 4]
    assert all({"seq", "prev_hash", "hash"} <= row.keys() for row in rows)
    assert (ok.returncode, ok.stdout) == (0, f"ok: 4 rows, head {rows[-1]['hash']}\n"), ok.stderr
    kept = rows[-1]["hash"]
    await _tamper(database, "UPDATE audit SET event = 'decision' WHERE seq = 3")
    bad = await asyncio.to_thread(_opsgate, database, "audit", "verify")
    assert bad.returncode == 1 and bad.stdout.startswith("seq 3: edited"), bad.stdout
    await _tamper(database, "DELETE FROM audit WHERE seq >= 3")
    cut = await asyncio.to_thread(_opsgate, database, "audit", "verify", "--head", kept)
    assert cut.returncode == 1 and cut.stdout.startswith("seq 3: truncated"), cut.stdout


async def test_verify_checks_the_key(database: str) -> None:
    await _write(database, "U0ALICE", 2, OPSGATE_AUDIT_KEY="k1")
    good = await asyncio.to_thread(_opsgate, database, "audit", "verify", OPSGATE_AUDIT_KEY="k1")
    assert good.returncode == 0 and good.stdout.startswith("ok: 2 rows, head "), good.stderr
    missing = await asyncio.to_thread(_opsgate, database, "audit", "verify")
    assert missing.returncode == 1, missing.stdout
    assert "keyed" in missing.stdout and "set OPSGATE_AUDIT_KEY" in missing.stdout
    wrong = await asyncio.to_thread(_opsgate, database, "audit", "verify", OPSGATE_AUDIT_KEY="k2")
    assert wrong.returncode == 1 and "fingerprint" in wrong.stdout and "differs" in wrong.stdout
    assert "k1" not in missing.stdout + wrong.stdout and "k2" not in wrong.stdout


def _plain_rewrite(rows: list[dict[str, object]]) -> list[tuple[int, str, str]]:
    """(seq, prev_hash, hash) of every row recomputed with plain SHA-256, as someone who owns
    the database but not the key would."""
    prev, out = "0" * 64, []
    for row in rows:
        data = {k: v for k, v in row.items() if k != "hash"} | {"prev_hash": prev}
        body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.sha256(body.encode() + prev.encode()).hexdigest()
        out.append((int(str(row["seq"])), prev, digest))
        prev = digest
    return out


async def test_a_keyed_log_rewritten_with_plain_sha256_never_verifies(database: str) -> None:
    await _write(database, "U0ALICE", 3, OPSGATE_AUDIT_KEY="k1")
    listed = await asyncio.to_thread(_opsgate, database, "audit", "--json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    for seq, prev, digest in _plain_rewrite(rows):
        await _tamper(
            database, f"UPDATE audit SET prev_hash = '{prev}', hash = '{digest}' WHERE seq = {seq}"
        )
        await _tamper(database, f"UPDATE audit_chain SET hash = '{digest}'")
    plain = await asyncio.to_thread(_opsgate, database, "audit", "verify")
    assert plain.returncode == 1 and "keyed" in plain.stdout, plain.stdout
    keyed = await asyncio.to_thread(_opsgate, database, "audit", "verify", OPSGATE_AUDIT_KEY="k1")
    assert keyed.returncode == 1 and keyed.stdout.startswith("seq 1: edited"), keyed.stdout


async def test_hand_edited_rows_are_named_by_seq_and_listed_without_a_traceback(
    database: str,
) -> None:
    await _write(database, "U0ALICE", 5)
    postgres = database.startswith("postgres")
    # Bad JSON where SQLite keeps text; jsonb only holds JSON, so there: JSON that is no object.
    bad = "'[1, 2]'" if postgres else "'{\"n\": '"
    await _tamper(database, f"UPDATE audit SET details = {bad} WHERE seq = 2")
    verify = await asyncio.to_thread(_opsgate, database, "audit", "verify")
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert verify.stdout.startswith("seq 2: unreadable"), verify.stdout
    assert "Traceback" not in verify.stderr, verify.stderr
    table = await asyncio.to_thread(_opsgate, database, "audit")
    assert table.returncode == 0 and "Traceback" not in table.stderr, table.stderr
    assert "seq 2 (id 2): this row cannot be read" in table.stdout, table.stdout
    assert table.stdout.count("U0ALICE") == 4, table.stdout
    lines = (await asyncio.to_thread(_opsgate, database, "audit", "--json")).stdout.splitlines()
    listed = [json.loads(line) for line in lines]
    assert [row["seq"] for row in listed] == [1, 2, 3, 4, 5]
    assert "unreadable" in listed[1] and listed[2]["actor"] == "U0ALICE"
    # A changed field and a deleted row further on: the first failure is still the one named.
    await _tamper(database, "UPDATE audit SET details = '{\"n\": 2}' WHERE seq = 2")
    await _tamper(database, "UPDATE audit SET actor = 'UEVIL' WHERE seq = 3")
    edited = await asyncio.to_thread(_opsgate, database, "audit", "verify")
    assert edited.returncode == 1 and edited.stdout.startswith("seq 2: edited"), edited.stdout
    await _tamper(database, "DELETE FROM audit WHERE seq <= 2")
    deleted = await asyncio.to_thread(_opsgate, database, "audit", "verify")
    assert deleted.returncode == 1 and deleted.stdout.startswith("seq 1: deleted"), deleted.stdout


class _Follower:
    """`opsgate audit --follow --json` running; `rows(n)` waits for the next rows."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.seqs: list[int] = []

    async def ready(self) -> None:
        """Until it has read where the log ends (it prints from there)."""
        assert self.process.stderr is not None
        line = await asyncio.wait_for(self.process.stderr.readline(), 60)
        assert b"following" in line, line

    async def rows(self, count: int, timeout: float = 30) -> list[tuple[object, int]]:
        """(actor, seq) of the next `count` rows written by the test's writers (rows the bot
        writes itself, actor None, are skipped but must keep the seqs gap-free)."""
        assert self.process.stdout is not None
        found: list[tuple[object, int]] = []
        while len(found) < count:
            line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
            assert line, "the follower stopped"
            row = json.loads(line)
            assert not self.seqs or row["seq"] == self.seqs[-1] + 1, (self.seqs, row)
            self.seqs.append(row["seq"])
            if row["actor"] is not None:
                found.append((row["actor"], row["seq"]))
        return found


@contextlib.asynccontextmanager
async def _follower(db: str, *args: str) -> AsyncIterator[_Follower]:
    process = await asyncio.create_subprocess_exec(
        str(OPSGATE),
        "audit",
        "--follow",
        "--json",
        *args,
        env=_environment(OPSGATE_DB=db),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        follower = _Follower(process)
        await follower.ready()
        yield follower
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


async def test_follow_prints_new_rows_of_other_processes_across_a_bot_restart(
    database: str, tmp_path: Path
) -> None:
    from tests.support.bot_process import bot_process

    await _write(database, "UOLD", 2)  # before the follower: not printed
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack, _follower(database) as follower:
        async with bot_process(tmp_path, llm, slack, OPSGATE_DB=database) as bot:
            await _write(database, "U1", 2)
            assert await follower.rows(2) == [("U1", 3), ("U1", 4)]
            assert await bot.stop(signal.SIGTERM) == 0
        await _write(database, "U2", 1)  # while no bot runs
        async with bot_process(tmp_path, llm, slack, OPSGATE_DB=database):
            await _write(database, "U3", 1)
            later = await follower.rows(2)
        assert [actor for actor, _ in later] == ["U2", "U3"]
        assert follower.process.returncode is None


async def test_follow_on_postgresql_is_woken_at_once(postgres_url: str) -> None:
    """Rows show well before the 5 s look the follower takes without a notification."""
    await _write(postgres_url, "UOLD", 1)
    async with _follower(postgres_url) as follower:
        for n in range(3):
            await _write(postgres_url, f"U{n}", 1)
            assert await follower.rows(1, timeout=2) == [(f"U{n}", n + 2)]


async def test_three_processes_writing_at_once_keep_the_chain(database: str) -> None:
    await _write(database, "U0", 1)  # migrated once, before the race
    await asyncio.gather(*(_write(database, f"U{n}", 20) for n in range(1, 4)))
    ok = await asyncio.to_thread(_opsgate, database, "audit", "verify")
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 61 rows, head "), ok.stdout


async def test_follow_after_a_seq_resumes_there_then_follows(database: str) -> None:
    """A log shipper that stored seq 3 restarts: it gets 4 and 5 (written while it was
    away), then the rows written as it follows."""
    await _write(database, "UOLD", 5)
    async with _follower(database, "--after", "3") as follower:
        assert await follower.rows(2) == [("UOLD", 4), ("UOLD", 5)]
        assert follower.seqs == [4, 5]
        await _write(database, "UNEW", 1)
        assert await follower.rows(1) == [("UNEW", 6)]


def test_after_goes_with_follow(tmp_path: Path) -> None:
    alone = _opsgate(str(tmp_path / "opsgate.db"), "audit", "--after", "3")
    assert alone.returncode == 2 and "--follow" in alone.stderr
