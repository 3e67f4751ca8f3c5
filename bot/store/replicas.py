"""What a store shared by several replicas adds to `Store`: leases, and wake-ups between replicas.

Only the PostgreSQL backend has these; SQLite is one process holding an exclusive lock. Callers
test for them with `isinstance(store, LeaseHolder)` / `isinstance(store, WakeSource)`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Protocol, runtime_checkable

__all__ = ["LeaseHolder", "Wake", "WakeSource"]


@dataclass(frozen=True, slots=True)
class Wake:
    """Another replica changed something this one may have to act on.

    `resume`: a gated call of session `key` was decided or expired (its batch may now resume).
    `queue`: channel `key` may have a free slot or a new queued run.
    """

    kind: Literal["resume", "queue"]
    key: str


@runtime_checkable
class LeaseHolder(Protocol):
    """A store on which this process holds a replica lease (see docs/architecture.md)."""

    async def register_instance(
        self, *, lease: timedelta = ..., name: str | None = None
    ) -> str: ...

    async def heartbeat(self) -> bool: ...

    async def release(self) -> None: ...


@runtime_checkable
class WakeSource(Protocol):
    """A store that tells each replica what the others changed (PostgreSQL: LISTEN/NOTIFY)."""

    def wakeups(self) -> AbstractAsyncContextManager[AsyncIterator[Wake]]:
        """Wake-ups caused by other processes, while the context is open; the iterator raises
        `StoreError` if the connection is lost (listen again: nothing queues up meanwhile)."""
        ...
