"""Waiting for Bolt listeners still at work after their request was acknowledged.

Bolt acknowledges an event (HTTP 200) and then runs its listener in a task of its own. On
shutdown those tasks must finish before the store closes, or an acknowledged mention would be
dropped; Bolt keeps no list of them, so they are found by their coroutine's name.
"""

from __future__ import annotations

import asyncio

__all__ = ["wait_for_listeners"]

_BOLT_TASK = "run_ack_function_asynchronously"


async def wait_for_listeners(timeout: float) -> int:
    """Wait up to `timeout` seconds for Bolt's listener tasks; returns how many were running."""
    this = asyncio.current_task()
    running = [
        task
        for task in asyncio.all_tasks()
        if task is not this and _BOLT_TASK in repr(task.get_coro())
    ]
    if running:
        await asyncio.wait(running, timeout=timeout)
    return len(running)
