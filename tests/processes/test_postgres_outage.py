"""A click while PostgreSQL does not answer (the network to it drops every byte) is answered
within Slack's 3 seconds, and the clicker is told it was not saved; through the real app over
signed loopback HTTP, on the private PostgreSQL cluster behind a loopback proxy."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.scenarios.test_app import ALICE, BOB, make_tools
from tests.support.harness import CHANNEL, _block_of, running_bot
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.slack_requests import block_actions, interaction_body

FORM = "application/x-www-form-urlencoded"

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures this module uses


class Blackhole:
    """A TCP proxy to PostgreSQL that, once `drop` is set, forwards nothing either way (an
    outage as a client sees one: no error, no answer)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.drop = False
        self.tasks: set[asyncio.Task[None]] = set()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                if not self.drop:
                    writer.write(data)
                    await writer.drain()
        writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        for task in (
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ):
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[int]:
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        try:
            yield server.sockets[0].getsockname()[1]
        finally:
            server.close()
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)


async def test_a_click_during_a_postgres_outage_is_answered_in_time_and_told(
    tmp_path: Path, postgres_url: str
) -> None:
    parts = urlsplit(postgres_url)
    proxy = Blackhole(parts.hostname or "127.0.0.1", parts.port or 5432)
    async with proxy.serving() as port:
        netloc = parts.netloc.rsplit(":", 1)[0] + f":{port}"
        url = urlunsplit(parts._replace(netloc=netloc))
        async with running_bot(
            tmp_path, tools=make_tools(tmp_path), settings={"opsgate_db": url}
        ) as bot:
            bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo later"})])
            await bot.mention("run it", user=ALICE)
            [card] = await bot.wait_cards(1)
            row = await bot.deps.store.get_call(card["ledger_id"])
            assert row is not None and row.card_ts
            blocks = card["params"]["blocks"]
            payload = block_actions(
                "opsgate_approve",
                row.id,
                user=BOB,
                channel=CHANNEL,
                message_ts=row.card_ts,
                block_id=_block_of(blocks, "opsgate_approve") or "opsgate_decision",
                blocks=blocks,
            )
            proxy.drop = True
            try:
                started = time.monotonic()
                response = await bot.post(interaction_body(payload), FORM)
                answered = time.monotonic() - started
                assert response.status_code == 200
                assert answered < 3.0, f"answered after {answered:.1f} s"
                [told] = await bot.slack.wait_for("chat.postEphemeral")
                assert told.params["user"] == BOB
                assert "couldn't save your click" in told.params["text"]
                assert not bot.deps.write_health.writable
            finally:
                proxy.drop = False
