"""Child process for tests/processes/test_store_crash.py: append turns to one session until killed.

Usage: python -m tests.support.store_crash_child DB_PATH

After each turn is committed it prints `committed <n>` (n counts from 0 over the session's whole
life, so a restarted child carries on where the last one stopped) and flushes, so the parent
knows exactly which turns it may demand after it SIGKILLs us.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agent_core import ChatMessage, ToolCall
from bot.store import SQLiteStore

MESSAGES_PER_TURN = 3


def turn(n: int) -> list[ChatMessage]:
    """One turn: a question, a tool call, and a bulky tool result (more pages per commit)."""
    call = ToolCall(id=f"call_{n}", name="service_status", arguments=f'{{"n": {n}}}')
    return [
        ChatMessage.user(f"turn {n}"),
        ChatMessage.assistant(None, (call,)),
        ChatMessage.tool(f"result {n} " + "x" * 3000, call.id),
    ]


async def main(db: Path) -> None:
    async with SQLiteStore(db) as store:
        session = await store.get_or_create_session("T1", "C1", "crash")
        n = len(await store.load_messages(session.id)) // MESSAGES_PER_TURN
        while True:
            await store.append_messages(session.id, turn(n))
            print(f"committed {n}", flush=True)
            n += 1


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
