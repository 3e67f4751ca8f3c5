"""The expiry timer wakes at the earliest deadline: a reminder at its time, a card expired within
a second of its time; a fake clock moved by the timer's own waits, so no test sleeps."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.policy import Policy
from bot.runs.ladder import LATE_BY, ExpiryTimer
from tests.scenarios.test_app import make_tools
from tests.support.harness import running_bot, texts

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def test_the_timer_wakes_for_the_reminder_then_the_expiry(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml('[defaults]\nttl = "10m"\nremind_before = "2m"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        bot.llm.reply_tool_calls(
            [(f"call_{i}", "run_command", {"command": f"echo {i}"}) for i in range(3)]
        )
        bot.llm.reply_text("Nothing ran: the requests expired.")
        await bot.mention("three things")
        cards = await bot.wait_cards(3)

        waits: list[float] = []

        async def wait(seconds: float, wake: asyncio.Event) -> None:
            if len(waits) == 3:
                raise asyncio.CancelledError  # done: stop the timer's loop
            waits.append(seconds)
            clock.now += timedelta(seconds=seconds)

        timer = ExpiryTimer(
            bot.deps.store,
            clock=clock,
            remind_before=policy.remind_before,
            longest=3600,
            wait=wait,
        )
        with contextlib.suppress(asyncio.CancelledError):
            await timer.run(bot.service.expire_due)
        await bot.llm.wait_for_requests(2)
        await bot.settle()

        # Woke at the reminder (8 minutes in), then at the expiry (2 minutes later).
        assert waits[:2] == [480 + LATE_BY, 120.0]
        reminders = [t for t in texts(bot.slack) if ":alarm_clock:" in t]
        assert len(reminders) == 1  # one for the batch of three, not one per call
        assert all("`run_command`" in reminders[0] for _ in cards)
        assert reminders[0].count("run_command") == 3 and "they expire" in reminders[0]
        for card in cards:
            row = await bot.deps.store.get_call(card["ledger_id"])
            assert row is not None and row.status == "expired" and row.expires_at is not None
            assert row.decided_at is not None
            assert timedelta(0) <= row.decided_at - row.expires_at < timedelta(seconds=1)


async def test_a_new_deadline_wakes_a_sleeping_timer(tmp_path: Path) -> None:
    clock = Clock()
    async with running_bot(tmp_path, tools=make_tools(tmp_path), clock=clock) as bot:
        timer = ExpiryTimer(bot.deps.store, clock=clock, remind_before=None, longest=3600)
        assert await timer.next_delay() == 3600  # nothing waits: sleep the longest
        ticks = asyncio.Queue[None]()

        async def tick() -> None:
            ticks.put_nowait(None)

        task = asyncio.create_task(timer.run(tick))
        try:
            await asyncio.wait_for(ticks.get(), 5)  # the first round
            timer.poke()
            await asyncio.wait_for(ticks.get(), 5)  # woken long before an hour
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
