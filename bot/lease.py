"""This process's replica lease: registered at start, renewed by an owned task, released last.

Only a store shared by replicas (`bot.store.LeaseHolder`, i.e. PostgreSQL) has leases; with
SQLite the exclusive file lock plays that part and this does nothing. Survivors recover only the
work of a replica whose lease lapsed or was released (docs/architecture.md, "Replicas").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from datetime import timedelta

from .store import LeaseHolder, Store, StoreError

__all__ = ["held_lease", "replica_name"]

logger = logging.getLogger("opsgate.lease")


def replica_name() -> str:
    """How this replica appears in the `instances` table: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.asynccontextmanager
async def held_lease(
    store: Store, *, lease: timedelta, heartbeat: timedelta, name: str | None = None
) -> AsyncIterator[str | None]:
    """Hold a lease on `store` while the context is open; yields the instance id (None when the
    store has no leases). Leave it only after the work in flight has finished: releasing tells
    the other replicas that whatever this one left `executing` is theirs to report."""
    if not isinstance(store, LeaseHolder):
        yield None
        return
    if heartbeat >= lease:
        raise ValueError(f"the heartbeat ({heartbeat}) must be shorter than the lease ({lease})")
    instance = await store.register_instance(lease=lease, name=name or replica_name())
    logger.info(
        "holding replica lease %s (%s s, renewed every %s s)",
        instance,
        lease.total_seconds(),
        heartbeat.total_seconds(),
    )
    beating = asyncio.create_task(_beat(store, heartbeat.total_seconds()), name="lease heartbeat")
    try:
        yield instance
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
        try:
            await store.release()
        except StoreError:
            logger.exception("could not release replica lease %s; it lapses by itself", instance)


async def _beat(store: LeaseHolder, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            if not await store.heartbeat():
                logger.error("the replica lease is gone; other replicas may recover our work")
        except StoreError:
            logger.exception("renewing the replica lease failed; retrying")
