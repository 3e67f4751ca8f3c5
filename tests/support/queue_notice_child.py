"""Child process for tests/processes/test_queue_notice_processes.py: one "replica" of the
channel's queued notice (a store on the shared database, an outbox sender, `QueueNotices`),
driven by lines on stdin.

Usage: python -m tests.support.queue_notice_child DATABASE SLACK_URL NAME [LEASE_SECONDS]

Commands: `queue <n>` (a message of thread n is queued in channel C1, and said so), `start`
(the oldest queued message of C1 starts), `quit`. Each is answered `ok` once this process's
sender has nothing left to send (another process may still be sending a row this one put).
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from slack_sdk.web.async_client import AsyncWebClient

from bot.runs.notices import Queued
from bot.runs.output import Thread
from bot.slack.outbox import SlackOutbox
from bot.slack.queue_notice import QueueNotices
from bot.store import Store, open_store

CHANNEL = "C1"


async def command(store: Store, notices: QueueNotices, line: str) -> None:
    word, _, arg = line.partition(" ")
    if word == "queue":
        thread = Thread("T1", CHANNEL, f"1700000000.{int(arg):06d}")
        session = await store.get_or_create_session("T1", CHANNEL, thread.thread_ts)
        await store.enqueue(session.id, requester="U1", text=f"alert {arg}")
        await notices.queued(thread, Queued(limit=1, ahead=0))
    elif word == "start":
        item = await store.claim_queued(CHANNEL, limit=100)
        assert item is not None, "nothing queued to start"
        session = await store.get_session(item.session_id)
        assert session is not None
        await notices.started(Thread("T1", CHANNEL, session.thread_ts))
    else:
        raise ValueError(f"unknown command {line!r}")


async def main(database: str, slack_url: str, name: str, lease: timedelta) -> None:
    async with open_store(database) as store:
        client = AsyncWebClient(token="xoxb-test", base_url=slack_url)
        outbox = SlackOutbox(store, client, claimer=name, poll=0.05, lease=lease)
        notices = QueueNotices(outbox, store)
        sender = asyncio.create_task(outbox.run())
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        print("ready", flush=True)
        try:
            while line := (await reader.readline()).decode().strip():
                if line == "quit":
                    break
                await command(store, notices, line)
                await outbox.wait_idle()
                print("ok", flush=True)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)


if __name__ == "__main__":
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 60.0
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], timedelta(seconds=seconds)))
