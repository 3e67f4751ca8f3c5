"""Group commit of outside requests: the requests that arrive while one transaction is being
written are written together in the next, so a burst costs a few transactions, not one each."""

from __future__ import annotations

import asyncio
from typing import Any

from ..store import PlaneRequest, Store
from ..tasks import TaskSupervisor

__all__ = ["Recorder"]

_Pending = tuple[PlaneRequest, dict[str, Any], "asyncio.Future[tuple[PlaneRequest, bool]]"]


class Recorder:
    """The writer runs as owned work of `tasks` (a graceful stop waits for it)."""

    def __init__(self, store: Store, tasks: TaskSupervisor) -> None:
        self.store = store
        self.tasks = tasks
        self._waiting: list[_Pending] = []
        self._writing = False

    async def record(
        self, request: PlaneRequest, audit: dict[str, Any]
    ) -> tuple[PlaneRequest, bool]:
        """`Store.plane_record`, committed with whatever else is waiting."""
        done: asyncio.Future[tuple[PlaneRequest, bool]] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, audit, done))
        if not self._writing:
            self._writing = True
            try:
                self.tasks.spawn(self._write(), name="plane requests")
            except RuntimeError:  # stopping: no owner for it, so this request writes it
                await self._write()
        return await done

    async def _write(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    results = await self.store.plane_record_many([(r, a) for r, a, _ in batch])
                except BaseException as exc:
                    for _, _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, _, done), result in zip(batch, results, strict=True):
                    if not done.done():
                        done.set_result(result)
        finally:
            self._writing = False
