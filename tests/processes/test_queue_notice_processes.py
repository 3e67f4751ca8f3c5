"""One "queued" notice per channel per burst across processes: two real processes
(`tests/support/queue_notice_child.py`) on one database, an SQLite file or PostgreSQL, queue
and start messages of one channel; one of them is killed (-9) and started again. Whichever
process sends a drawing, it edits the one message the burst posted, until the queue is empty;
the next queued message posts the next burst's notice. Never two for one burst."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.slack_api import SlackAPIStandIn, SlackCall

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures the PostgreSQL case uses

ROOT = Path(__file__).resolve().parents[2]
CHANNEL = "C1"


class Child:
    """One process of the pair, driven over its stdin."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(
        cls, database: str, slack: SlackAPIStandIn, name: str, *, lease: float = 60
    ) -> Child:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.queue_notice_child",
            database,
            slack.url,
            name,
            str(lease),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        child = cls(process)
        await child._answer("ready")
        return child

    async def do(self, line: str) -> None:
        await self.send(line)
        await self._answer("ok")

    async def send(self, line: str) -> None:
        """The command, without waiting for its `ok` (it may never come)."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n".encode())
        await self.process.stdin.drain()

    async def _answer(self, expected: str) -> None:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout=60)
        assert line.decode().strip() == expected, f"the child said {line!r} (exit {self.gone})"

    @property
    def gone(self) -> int | None:
        return self.process.returncode

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


def notices(slack: SlackAPIStandIn) -> list[SlackCall]:
    return [
        c
        for c in slack.calls_to("chat.postMessage")
        if c.ok and str(c.params.get("text")).startswith(":hourglass")
    ]


async def until(slack: SlackAPIStandIn, post: Callable[[], SlackCall], words: str) -> None:
    """Until the notice shows `words` (the last drawing may be another process's to send)."""

    async def shows() -> None:
        while True:
            message = slack.message(CHANNEL, str(post().response["ts"]))
            if message is not None and words in str(message["text"]):
                return
            await asyncio.sleep(0.05)  # another process's work: no event to wait on

    try:
        await asyncio.wait_for(shows(), 30)
    except TimeoutError:
        drawn = [str(m.get("text")) for m in slack.messages]
        raise AssertionError(f"no notice shows {words!r}: {drawn}") from None


async def test_two_processes_and_a_kill_edit_one_notice_per_burst(
    database: str, slack: SlackAPIStandIn
) -> None:
    a = await Child.start(database, slack, "a")
    b = await Child.start(database, slack, "b")
    children = [a, b]
    try:

        def first() -> SlackCall:
            return notices(slack)[0]

        for n in range(3):
            await a.do(f"queue {n}")
        await until(slack, first, "3 requests are waiting")
        await b.do("start")  # the other process: the same message is edited
        await until(slack, first, "2 requests are waiting")
        await a.kill()  # kill -9, then started again on the same database
        a = await Child.start(database, slack, "a")
        children.append(a)
        await a.do("start")
        await until(slack, first, "1 request is waiting")
        await b.do("queue 3")
        await until(slack, first, "2 requests are waiting")
        await a.do("start")
        await b.do("start")
        await until(slack, first, "queue of this channel is empty")
        assert len(notices(slack)) == 1  # one notice for the whole burst
        await b.do("queue 4")  # the queue emptied: a new burst, a new notice

        def second() -> SlackCall:
            return notices(slack)[1]

        await asyncio.wait_for(_posted_twice(slack), 30)
        await until(slack, second, "1 request is waiting")
        await a.do("start")
        await until(slack, second, "queue of this channel is empty")
    finally:
        for child in children:
            await child.kill()
    assert len(notices(slack)) == 2
    edited = {str(c.params["ts"]) for c in slack.calls_to("chat.update") if c.ok}
    assert edited == {str(c.response["ts"]) for c in notices(slack)}


async def test_a_notice_posted_as_its_process_was_killed_is_adopted_not_posted_again(
    database: str, slack: SlackAPIStandIn
) -> None:
    """Slack applied the notice's post, and its process was killed -9 waiting for the answer
    (so its ts was never recorded): the other process, once the row's lease ran out, finds the
    notice by the burst in its metadata and edits it. One notice for the burst."""
    slack.hang_after("chat.postMessage")
    a = await Child.start(database, slack, "a", lease=1)
    children = [a]
    try:
        await a.send("queue 0")
        [post] = await slack.wait_for("chat.postMessage", timeout=30)
        await a.kill()
        b = await Child.start(database, slack, "b", lease=1)
        children.append(b)
        await b.do("queue 1")

        def first() -> SlackCall:
            return notices(slack)[0]

        await until(slack, first, "2 requests are waiting")
        await b.do("start")
        await b.do("start")
        await until(slack, first, "queue of this channel is empty")
    finally:
        for child in children:
            await child.kill()
    assert notices(slack) == [post]
    edited = {str(c.params["ts"]) for c in slack.calls_to("chat.update") if c.ok}
    assert edited == {str(post.response["ts"])}


async def _posted_twice(slack: SlackAPIStandIn) -> None:
    while True:
        if len(notices(slack)) >= 2:
            return
        await asyncio.sleep(0.05)  # another process's work: no event to wait on
