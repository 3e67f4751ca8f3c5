"""Edits are decisions that happen once across processes: several OS processes sharing one
database (SQLite file, or the private PostgreSQL cluster) race to edit and to approve the same
call; exactly one of them records anything, and the call holds that winner's version. "Allow
for" is one transaction: a process killed inside it leaves neither the approval nor the
allowance."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from bot.settings import HOLD_ENV
from bot.store import open_store
from tests.store.contract.helpers import mention, paused_session
from tests.support.postgres import postgres_cluster, postgres_url

__all__ = ["postgres_cluster", "postgres_url"]

ROOT = Path(__file__).resolve().parents[2]

_RACER = """
import asyncio, json, sys
from agent_core import call_digest, canonical_arguments
from bot.store import open_store

async def main():
    target, ledger_id, role, n = sys.argv[1:5]
    async with open_store(target) as store:
        print("ready", flush=True)
        sys.stdin.readline()  # everyone starts together
        if role == "edit":
            args = {"service": f"edited-{n}", "force": False}
            outcome = await store.edit_call(
                ledger_id, canonical_arguments(args), call_digest("restart_service", args),
                user_id=f"UEDIT{n}",
            )
        else:
            outcome = await store.decide(ledger_id, "approved", user_id=f"UAPPROVE{n}")
        print(json.dumps({"recorded": outcome.recorded, "who": f"{role}{n}"}), flush=True)

asyncio.run(main())
"""


async def _race(target: str, ledger_id: str, racers: int = 6) -> list[dict[str, object]]:
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _RACER,
            target,
            ledger_id,
            "edit" if i % 2 else "approve",
            str(i),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for i in range(racers)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert await asyncio.wait_for(child.stdout.readline(), 60) == b"ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            await child.stdin.drain()
        results = []
        for child in children:
            assert child.stdout is not None
            results.append(json.loads(await asyncio.wait_for(child.stdout.readline(), 60)))
        return results
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
            await child.wait()


async def test_on_sqlite_an_edit_racing_approvals_in_other_processes_has_one_winner(
    tmp_path: Path,
) -> None:
    await _one_winner(str(tmp_path / "opsgate.db"))


async def test_on_postgresql_an_edit_racing_approvals_in_other_processes_has_one_winner(
    postgres_url: str,
) -> None:
    await _one_winner(postgres_url)


async def _one_winner(target: str) -> None:
    async with open_store(target, person=mention) as store:
        _, rows = await paused_session(store)
        ledger_id = rows[0].id
        results = await _race(target, ledger_id)
        winners = [r["who"] for r in results if r["recorded"]]
        assert len(winners) == 1, results
        row = await store.get_call(ledger_id)
        assert row is not None and row.status == "approved"
        [winner] = winners
        edited = str(winner).startswith("edit")
        assert (row.edited_arguments is not None) == edited
        if edited:
            assert row.running_arguments()["service"] == f"edited-{str(winner)[4:]}"
        decided = [a for a in await store.audit_rows() if a.event in ("edited", "decision")]
        assert len(decided) == 1


_ALLOWER = """
import asyncio, sys
from datetime import UTC, datetime, timedelta
from bot.store import AllowanceGrant, open_store

async def main():
    target, ledger_id, digest = sys.argv[1:4]
    grant = AllowanceGrant(
        channel_id="C1", tool="restart_service", shape='{"kind": "exact", "arguments": "{}"}',
        label="these exact arguments", expires_at=datetime.now(UTC) + timedelta(hours=1),
    )
    async with open_store(target) as store:
        await store.allow_call(ledger_id, grant, user_id="UBOB", digest=digest)
        print("allowed", flush=True)

asyncio.run(main())
"""


async def _killed_between_approval_and_allowance(target: str) -> None:
    """A process killed -9 inside "Allow for" after approving the call, before writing the
    allowance: the database holds neither, and the same click afterwards holds both."""
    async with open_store(target, person=mention) as store:
        _, rows = await paused_session(store)
        ledger_id, digest = rows[0].id, rows[0].digest
    env = {**os.environ, HOLD_ENV: "allow_decided"}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _ALLOWER,
        target,
        ledger_id,
        digest,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stderr is not None
        line = await asyncio.wait_for(child.stderr.readline(), 60)
        assert line.startswith(b"opsgate-fault: holding at allow_decided"), line
        child.kill()
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()
    async with open_store(target, person=mention) as store:
        row = await store.get_call(ledger_id)
        assert row is not None and row.status == "pending" and row.approvals == ()
        assert await store.active_allowances() == []
        assert not [a for a in await store.audit_rows() if a.event in ("decision", "allowance")]
    # Nothing was half-done, so the click can be made again, and it takes.
    again = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _ALLOWER,
        target,
        ledger_id,
        digest,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(again.communicate(), 60)
    assert out == b"allowed\n"
    async with open_store(target, person=mention) as store:
        row = await store.get_call(ledger_id)
        assert row is not None and row.status == "approved"
        [allowance] = await store.active_allowances()
        assert allowance.ledger_id == ledger_id


async def test_on_sqlite_a_kill_inside_allow_leaves_no_approved_call_without_allowance(
    tmp_path: Path,
) -> None:
    await _killed_between_approval_and_allowance(str(tmp_path / "opsgate.db"))


async def test_on_postgresql_a_kill_inside_allow_leaves_no_approved_call_without_allowance(
    postgres_url: str,
) -> None:
    await _killed_between_approval_and_allowance(postgres_url)
