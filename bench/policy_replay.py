"""How long `opsgate policy replay` takes over 100,000 recorded calls:
`python bench/policy_replay.py`.

The ledger is an SQLite file the store created (its schema, 1,000 sessions through
`get_or_create_session`), its 100,000 `tool_calls` rows then inserted in one transaction of the
store's own database seam (a run's way, a transaction per call, would take the benchmark far
longer than the replay it measures). The calls are what a busy ops channel sends: 5,000
distinct commands (`kubectl` reads and deletes, `ls`, `rm`, `git`, `systemctl`, a pipe) drawn
with Zipf weights, so that most calls repeat a common command and thousands do not; a replay
judges each distinct call once per policy. The replay runs as a pipeline
would run it: `opsgate policy replay NEW.toml --json` in a process of its own, start-up
included, with a NEW that drops a quorum and a forbidden rule (so calls are reported). The
floor is the same process reading the rows alone (`opsgate audit --since 2h` would read another
table). Goal: under 10 s. Printed beside it: the cost per call when
every call is distinct (the policy's judge, twice), which no memo helps.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import json
import os
import random
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta

from agent_core import call_digest
from bench._common import REPO, machine
from bot.store import SQLiteStore

CALLS = 100_000
DISTINCT = 5_000
SESSIONS = 1_000
GOAL = 10.0

CURRENT = """
[tools.run_command]
approval = "rules"

[[tools.run_command.rules]]
prefix = ["rm"]
approval = "forbidden"

[[tools.run_command.rules]]
prefix = ["kubectl", "get"]
approval = "never"

[[tools.run_command.rules]]
prefix = ["kubectl", "delete"]
required_approvals = 2

[[tools.run_command.rules]]
prefix = ["ls"]
approval = "never"

[[tools.run_command.rules]]
prefix = ["systemctl", "restart"]
allow_for = "1h"
"""

NEW = CURRENT.replace("required_approvals = 2", "required_approvals = 1").replace(
    'prefix = ["rm"]\napproval = "forbidden"', 'prefix = ["rm"]'
)


def _command(rng: random.Random) -> str:
    """One command of the catalogue: eight kinds of call, 300 pods, 12 namespaces."""
    pod = f"web-{rng.randrange(300)}"
    namespace = f"team-{rng.randrange(12)}"
    return rng.choice(
        [
            f"kubectl get pods -n {namespace}",
            f"kubectl get pod {pod} -n {namespace} -o yaml",
            f"kubectl delete pod {pod} -n {namespace}",
            f"ls -la /var/log/{namespace}",
            f"rm -rf /tmp/{pod}",
            f"git -C /srv/{namespace} pull",
            f"systemctl restart {namespace}.service",
            f"kubectl logs {pod} -n {namespace} | grep ERROR",
        ]
    )


def _catalogue(rng: random.Random) -> tuple[list[str], list[float]]:
    """The distinct commands a team's agent sends, and how often: the k-th most common one
    1/k as often as the first (Zipf), as a few commands make up most of any ops log."""
    commands = sorted({_command(rng) for _ in range(DISTINCT * 3)})[:DISTINCT]
    rng.shuffle(commands)
    return commands, [1 / (k + 1) for k in range(len(commands))]


async def _fill(db: Path) -> None:
    rng = random.Random(7)
    commands, weights = _catalogue(rng)
    drawn = rng.choices(commands, weights, k=CALLS)
    async with SQLiteStore(db) as store:
        sessions = [
            (await store.get_or_create_session("T1", f"C0OPS{i % 20}", f"1700.{i}")).id
            for i in range(SESSIONS)
        ]
        start = datetime.now(UTC) - timedelta(days=20)
        rows = []
        for n, command in enumerate(drawn):
            arguments = json.dumps({"command": command}, separators=(",", ":"))
            rows.append(
                {
                    "id": f"L{n:07d}",
                    "session": sessions[n % SESSIONS],
                    "seq": n,
                    "call": f"call_{n}",
                    "arguments": arguments,
                    "digest": call_digest("run_command", {"command": command}),
                    "at": (start + timedelta(seconds=15 * n)).isoformat(),
                    "by": f"U0USER{n % 50:03d}",
                }
            )
        async with store._db.transaction("bench: fill the ledger") as tx:
            await tx.execute_many(
                "INSERT INTO tool_calls (id, session_id, message_seq, position, call_id, name, "
                "arguments, digest, needs_approval, status, requested_by, created_at) VALUES "
                "(:id, :session, :seq, 0, :call, 'run_command', :arguments, :digest, 1, "
                "'done', :by, :at)",
                rows,
            )


def _run(env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "opsgate"), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - started, done


def main() -> int:
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = root / "opsgate.db"
        filled = time.perf_counter()
        asyncio.run(_fill(db))
        print(f"ledger: {CALLS:,} calls in {time.perf_counter() - filled:.1f} s")
        (root / "current.toml").write_text(CURRENT)
        (root / "new.toml").write_text(NEW)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "OPSGATE_DB": str(db),
            "OPSGATE_POLICY": str(root / "current.toml"),
        }
        same, floor = _run(env, "policy", "replay", str(root / "current.toml"), "--json")
        took, done = _run(env, "policy", "replay", str(root / "new.toml"), "--json")
        if done.returncode != 0 or floor.returncode != 0:
            print(done.stderr or floor.stderr)
            return 1
        found = json.loads(done.stdout)
        print(
            f"replay of {found['calls']:,} calls ({len(found['looser']):,} looser, "
            f"{len(found['tighter']):,} tighter): {took:.2f} s; the same policy against "
            f"itself (nothing to report): {same:.2f} s; goal < {GOAL:.0f} s"
        )
        print(_worst_case())
        return 0 if took < GOAL and found["calls"] == CALLS else 1


def _worst_case() -> str:
    """Every call distinct, judged twice (no memo helps): the cost per call, in-process."""
    from agent_core import ToolCall
    from bot.policy import Policy

    rng = random.Random(11)
    calls = [
        ToolCall(id="x", name="run_command", arguments=json.dumps({"command": _command(rng)}))
        for _ in range(2_000)
    ]
    policies = (Policy.from_toml(CURRENT), Policy.from_toml(NEW))
    started = time.perf_counter()
    for call in calls:
        for policy in policies:
            policy.decide("run_command", call)
    each = (time.perf_counter() - started) / len(calls)
    return (
        f"worst case (every call distinct, judged under both policies): {each * 1e6:.0f} us "
        f"per call, so {each * CALLS:.0f} s for {CALLS:,} such calls (not the goal's ledger)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
