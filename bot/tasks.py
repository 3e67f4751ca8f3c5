"""An owner for background work, so nothing is left running, or lost silently, at shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

__all__ = [
    "TaskSupervisor",
]


logger = logging.getLogger("opsgate.tasks")


class TaskSupervisor:
    """Starts tasks, logs their failures, and cancels and awaits the rest on `aclose()`."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._services: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._idle = asyncio.Event()
        self._idle.set()

    def spawn(
        self, coro: Coroutine[Any, Any, Any], *, name: str, service: bool = False
    ) -> asyncio.Task[Any]:
        """Start a task. A `service` runs until shutdown and does not count as work in flight."""
        if self._closed:
            coro.close()
            raise RuntimeError(f"cannot start {name!r}: the bot is shutting down")
        task = asyncio.create_task(coro, name=name)
        if service:
            self._services.add(task)
        else:
            self._tasks.add(task)
            self._idle.clear()
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._services.discard(task)
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error("background task %r failed", task.get_name(), exc_info=exc)

    @property
    def closed(self) -> bool:
        """True once shutdown began: no new work may start."""
        return self._closed

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def wait_idle(self) -> None:
        """Wait until no task is running (tests and graceful shutdown use this)."""
        await self._idle.wait()

    async def aclose(
        self,
        *,
        grace: float = 0.0,
        stuck: Callable[[], Awaitable[None]] | None = None,
        stuck_after: float = 5.0,
    ) -> None:
        """Stop: let runs in flight finish for up to `grace` seconds, then cancel the rest.

        A run cancelled inside a tool leaves that call `executing`; the next start-up reports
        it as interrupted and never runs it again. A task that does not stop within
        `stuck_after` seconds of its cancel is waiting on something that does not answer (an
        asyncpg query's cancel waits on the server): `stuck` is called (the store drops its
        connections) and the tasks are awaited again.
        """
        self._closed = True
        if grace > 0 and self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace)
        tasks = [*self._tasks, *self._services]
        for task in tasks:
            task.cancel()
        if tasks and stuck is not None:
            _, pending = await asyncio.wait(tasks, timeout=stuck_after)
            if pending:
                names = ", ".join(sorted(t.get_name() for t in pending))
                logger.error(
                    "%s did not stop in %.0f s; dropping what they wait on", names, stuck_after
                )
                await stuck()
        await asyncio.gather(*tasks, return_exceptions=True)
