"""The inbox's group commit (`bot.store.queue._GroupCommit`) as machinery: who saves what when
callers are cancelled. The store's own behaviour is in tests/store/contract/test_inbox.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from bot.store.queue import _Add, _GroupCommit


class _Commits:
    """A commit that waits until the test lets it finish, and records what it saved."""

    def __init__(self) -> None:
        self.saved: list[list[str]] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def commit(self, adds: Sequence[_Add]) -> list[int | None]:
        self.started.set()
        await self.release.wait()
        self.saved.append([str(add[1]["n"]) for add in adds])
        return [int(add[1]["n"]) for add in adds]


def _add(n: int) -> _Add:
    return ("request", {"n": n}, ())


async def test_deliveries_waiting_behind_a_commit_are_saved_together_in_the_next() -> None:
    commits = _Commits()
    group = _GroupCommit(commits.commit)
    first = asyncio.create_task(group.submit(_add(1)))
    await asyncio.wait_for(commits.started.wait(), 5)
    rest = [asyncio.create_task(group.submit(_add(n))) for n in (2, 3, 4)]
    commits.release.set()
    assert await asyncio.wait_for(asyncio.gather(first, *rest), 5) == [1, 2, 3, 4]
    assert commits.saved == [["1"], ["2", "3", "4"]]


async def test_a_holder_cancelled_mid_commit_stops_and_the_others_are_saved_after() -> None:
    commits = _Commits()
    group = _GroupCommit(commits.commit)
    holder = asyncio.create_task(group.submit(_add(1)))
    await asyncio.wait_for(commits.started.wait(), 5)
    # 2 waits in line; the holder's commit is cut short: its own delivery is not saved.
    second = asyncio.create_task(group.submit(_add(2)))  # its first step runs before the cancel
    holder.cancel()
    done, _ = await asyncio.wait({holder}, timeout=5)
    assert done and holder.cancelled()
    commits.release.set()
    assert await asyncio.wait_for(second, 5) == 2
    assert commits.saved == [["2"]]


async def test_a_caller_cancelled_while_another_commit_holds_it_learns_it_was_saved() -> None:
    commits = _Commits()
    group = _GroupCommit(commits.commit)
    blocker = asyncio.create_task(group.submit(_add(1)))
    await asyncio.wait_for(commits.started.wait(), 5)
    commits.started.clear()
    holder = asyncio.create_task(group.submit(_add(2)))
    taken = asyncio.create_task(group.submit(_add(3)))
    commits.release.set()
    await asyncio.wait_for(blocker, 5)
    commits.release.clear()
    await asyncio.wait_for(commits.started.wait(), 5)  # 2 and 3 are in one commit now
    taken.cancel()  # 3 gave up, but its delivery is in the commit under way
    commits.release.set()
    assert await asyncio.wait_for(holder, 5) == 2
    assert await asyncio.wait_for(taken, 5) == 3  # saved: its caller is told so
    assert commits.saved == [["1"], ["2", "3"]]


async def test_deliveries_on_their_way_join_the_first_commit() -> None:
    """A burst's deliveries reach the inbox a loop step apart, one after another: while the line
    grows they are saved with the first one, not behind its commit."""
    commits = _Commits()
    commits.release.set()
    group = _GroupCommit(commits.commit)

    async def later(n: int, steps: int) -> int | None:
        for _ in range(steps):
            await asyncio.sleep(0)
        return await group.submit(_add(n))

    first = group.submit(_add(1))
    assert await asyncio.gather(first, later(2, 0), later(3, 1), later(4, 2)) == [1, 2, 3, 4]
    assert await group.submit(_add(5)) == 5  # a lone one does not wait for company
    assert commits.saved == [["1", "2", "3", "4"], ["5"]]
