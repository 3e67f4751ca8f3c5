"""Slack's Socket Mode, stood in on a loopback WebSocket: `apps.connections.open` on the Web API
stand-in hands out its URL; the bot connects, gets `hello`, and the test pushes envelopes
(events, interactions) down the socket and waits for the bot's acknowledgements.

Envelopes are shaped as Slack sends them (`envelope_id`, `type`, `payload`,
`accept_response_payload`); see https://api.slack.com/apis/socket-mode.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from types import TracebackType
from typing import Any

from aiohttp import WSMsgType, web

from tests.support.loopback import serve_on_loopback
from tests.support.slack_api import SlackAPIStandIn, SlackCall

__all__ = ["SocketModeStandIn"]


class SocketModeStandIn:
    """Use as `async with SocketModeStandIn(slack) as socket:`; `slack` answers
    `apps.connections.open` (only for an `xapp-` token) with this server's URL."""

    def __init__(self, slack: SlackAPIStandIn) -> None:
        self.slack = slack
        self.acks: dict[str, dict[str, Any]] = {}
        self.connections = 0
        self._ids = itertools.count(1)
        self._socket: web.WebSocketResponse | None = None
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._url = ""

    async def __aenter__(self) -> SocketModeStandIn:
        app = web.Application()
        app.router.add_get("/link", self._link)
        self._runner, base = await serve_on_loopback(app, access_log=None)
        self._url = base.replace("http://", "ws://") + "/link"
        self.slack.respond_with("apps.connections.open", self._open)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._socket is not None:
            await self._socket.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _open(self, call: SlackCall) -> dict[str, Any]:
        return {"ok": True, "url": self._url}  # the stand-in checked the token type

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        async with self._changed:
            self._socket = socket
            self.connections += 1
            self._changed.notify_all()
        await socket.send_json(
            {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0TEST"}}
        )
        async for message in socket:
            if message.type != WSMsgType.TEXT:
                continue
            ack = json.loads(message.data)
            async with self._changed:
                self.acks[str(ack.get("envelope_id"))] = ack
                self._changed.notify_all()
        async with self._changed:
            if self._socket is socket:
                self._socket = None
            self._changed.notify_all()
        return socket

    async def wait_connected(self, timeout: float = 15) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self._socket is not None)

    async def send(self, kind: str, payload: dict[str, Any], timeout: float = 15) -> None:
        """Push one envelope (`events_api` or `interactive`) and wait for its ack."""
        await self.wait_connected(timeout)
        assert self._socket is not None
        envelope_id = f"env-{next(self._ids)}"
        await self._socket.send_json(
            {
                "envelope_id": envelope_id,
                "type": kind,
                "payload": payload,
                "accept_response_payload": kind == "interactive",
                "retry_attempt": 0,
                "retry_reason": "",
            }
        )
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: envelope_id in self.acks)

    async def drop(self) -> None:
        """Close the bot's connection from Slack's side (as Slack does on a refresh)."""
        if self._socket is not None:
            await self._socket.close()
