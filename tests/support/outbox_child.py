"""Child process for tests/processes/test_outbox_superseded.py: one replica's outbox (a store on
the shared database and its sender), driven by lines on stdin.

Usage: python -m tests.support.outbox_child DATABASE SLACK_URL NAME LEASE_SECONDS

Commands: `tab <text>` (person U1's Home tab owed, showing `text`: a settling row of key
`home:U1`), `quit`. Each is answered `ok` once this process's sender has nothing left to send.
The process's Slack token is `xoxb-<NAME>`, so the stand-in tells whose call it was.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbox import HOME, SlackOutbox
from bot.store import OutboxEntry, open_store

SETTLE = 0.2


def tab(text: str) -> OutboxEntry:
    view = {"type": "home", "blocks": [], "private_metadata": text}
    params = {"user_id": "U1", "view": view}
    return OutboxEntry("views.publish", params, HOME, key="home:U1", settle=SETTLE)


async def main(database: str, slack_url: str, name: str, lease: timedelta) -> None:
    async with open_store(database) as store:
        client = AsyncWebClient(token=f"xoxb-{name}", base_url=slack_url)
        outbox = SlackOutbox(store, client, claimer=name, poll=0.05, lease=lease)
        sender = asyncio.create_task(outbox.run())
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        print("ready", flush=True)
        try:
            while line := (await reader.readline()).decode().strip():
                word, _, text = line.partition(" ")
                if word == "quit":
                    break
                if word != "tab":
                    raise ValueError(f"unknown command {line!r}")
                await outbox.put([tab(text)])
                await outbox.wait_idle()
                print("ok", flush=True)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], timedelta(seconds=float(sys.argv[4]))))
