"""A superseded outbox row is never sent, across processes and a kill -9: two real processes
(`tests/support/outbox_child.py`) on one database, an SQLite file or PostgreSQL. One sends a
person's Home tab, Slack applies it and the process is killed (-9) before it hears so; the
other, meanwhile, owes the same tab anew. Once the dead process's lease lapsed, the survivor
sends only the newer tab, once: the dead row, superseded, is dropped, not sent again."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.slack_api import SlackAPIStandIn

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures the PostgreSQL case uses

ROOT = Path(__file__).resolve().parents[2]


class Child:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, database: str, slack: SlackAPIStandIn, name: str) -> Child:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.outbox_child",
            database,
            slack.url,
            name,
            "1",
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        child = cls(process)
        await child.answer("ready")
        return child

    async def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n".encode())
        await self.process.stdin.drain()

    async def answer(self, expected: str) -> None:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout=60)
        assert line.decode().strip() == expected, f"the child said {line!r}"

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "opsgate.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def slack() -> AsyncIterator[SlackAPIStandIn]:
    async with SlackAPIStandIn() as standin:
        yield standin


async def test_a_tab_superseded_while_a_killed_process_held_it_is_never_sent_again(
    database: str, slack: SlackAPIStandIn
) -> None:
    slack.hang_after("views.publish")  # applied, never answered
    a = await Child.start(database, slack, "a")
    children = [a]
    try:
        await a.send("tab stale")
        await slack.wait_for("views.publish", timeout=30)
        # Started first, so its newer tab is owed well within the dead claim's one second.
        b = await Child.start(database, slack, "b")
        children.append(b)
        await a.kill()
        await b.send("tab latest")
        # Sent once the dead claim lapsed (a second): the stale row first, on the old line.
        await slack.wait_for("views.publish", count=2, timeout=30)
    finally:
        for child in children:
            await child.kill()
    sent = [
        (c.token, c.params["view"]["private_metadata"]) for c in slack.calls_to("views.publish")
    ]
    assert sent == [("xoxb-a", "stale"), ("xoxb-b", "latest")]
