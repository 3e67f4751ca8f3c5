"""What every replica does beyond answering its own requests (PostgreSQL replicas only).

- Wake-ups: another replica decided a call, expired one, queued a run or freed a queue slot;
  this one tries to resume that batch or start that channel's next run. The store's conditional
  claims make sure exactly one replica does, whichever hears first.
- The recovery pass, every heartbeat: the work of replicas whose lease lapsed (or that released
  it) is taken over. Their `executing` calls are reported interrupted in the thread (never run
  again), runs they had not begun or cut before any call ran go back to the queue (the latter
  answer their stored history), decided batches whose resume nobody
  claimed resume here, deliveries it saved but never processed are processed, and every
  channel's queue is kicked. A lost wake-up costs at most one interval.

See docs/architecture.md, "Replicas".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from datetime import timedelta

from ..store import LeaseHolder, Store, StoreError, Wake, WakeSource
from ..tasks import TaskSupervisor
from .service import RunService

__all__ = ["held_lease", "replica_name", "start_replica_duties", "take_over_lapsed"]


logger = logging.getLogger("opsgate.replica")

_LISTEN_RETRY = 2.0
"""Seconds between attempts to listen again after the wake-up connection was lost."""


def start_replica_duties(tasks: TaskSupervisor, service: RunService, *, interval: float) -> bool:
    """Start the wake-up listener and the recovery pass as services of `tasks` when the store
    is shared by replicas; False (nothing started) for a single-process store."""
    store = service.ctx.store
    started = False
    if isinstance(store, LeaseHolder):
        tasks.spawn(_recovery_loop(service, interval), name="recovery pass", service=True)
        started = True
    if isinstance(store, WakeSource):
        tasks.spawn(_wake_loop(store, service), name="wake-ups", service=True)
        started = True
    return started


async def take_over_lapsed(service: RunService) -> None:
    """One recovery pass (see the module docstring). Unlike start-up's `RunService.recover`, it
    neither reposts nor redraws the cards of paused runs: a live replica may be posting them."""
    store = service.ctx.store
    started = await store.queue_items(states=["started"])
    requeued = await store.requeue_interrupted()
    if requeued:
        logger.info("requeued %d run(s) of a lapsed replica", len(requeued))
    for recovered in await store.recover():
        await service.tell_cut(recovered, started)
        await service.cards.redraw_batch(recovered.session.id)
    for session in await store.sessions_awaiting_approval():
        await service.maybe_resume(session.id)
    await service.inbox.recover()  # deliveries it saved (and acknowledged) but never processed
    await service.dispatcher.kick_all()


async def act_on(service: RunService, wake: Wake) -> None:
    match wake:
        case Wake(kind="resume", key=session_id):
            await service.maybe_resume(session_id)
        case Wake(kind="queue", key=channel):
            await service.dispatcher.kick(channel)


async def _recovery_loop(service: RunService, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await take_over_lapsed(service)
        except Exception:
            logger.exception("the recovery pass failed; trying again in %s s", interval)


async def _wake_loop(source: WakeSource, service: RunService) -> None:
    while True:
        try:
            async with source.wakeups() as wakes:
                async for wake in wakes:
                    try:
                        await act_on(service, wake)
                    except Exception:
                        logger.exception("acting on %r failed", wake)
        except StoreError as exc:
            logger.warning("%s; listening again in %s s", exc, _LISTEN_RETRY)
        await asyncio.sleep(_LISTEN_RETRY)


# -- lease ---------------------------------------------------------------------------------------
# This process's replica lease: registered at start, renewed by an owned task, released last.
#
# Only a store shared by replicas (`bot.store.LeaseHolder`, i.e. PostgreSQL) has leases; with
# SQLite the exclusive file lock plays that part and this does nothing. Survivors recover only the
# work of a replica whose lease lapsed or was released (docs/architecture.md, "Replicas").


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
