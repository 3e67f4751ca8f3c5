"""Fault points for crash tests: `OPSGATE_FAULT_HOLD=<point>` makes the process say so on stderr
and then hold at that point, so a test can kill -9 it exactly there.

Points: `inbox` (a saved delivery, before it is processed), `resume_claimed` (after the resume
claim), `resume_started` (after `resume_started`, before the first call is marked executing),
`allow_decided` (in `Store.allow_call`'s transaction: the call approved, its allowance not yet
written), `shortcut` (the message shortcut acknowledged, its run not yet queued),
`redraw_claimed` (the outbox's sender took a card's owed redraw, not yet drawn or sent),
`plane_card` (an outside request answered 201, its card not yet posted), `plane_opening`
(an outside request's thread posted, its batch not yet recorded).
Unset, a point costs one environment lookup.
"""

from __future__ import annotations

import asyncio
import os
import sys

__all__ = [
    "HOLD_ENV",
    "checkpoint",
]


HOLD_ENV = "OPSGATE_FAULT_HOLD"


async def checkpoint(point: str) -> None:
    if os.environ.get(HOLD_ENV) != point:
        return
    print(f"opsgate-fault: holding at {point}", file=sys.stderr, flush=True)
    await asyncio.Event().wait()
