"""The approval plane's HTTP API, on the bot's port in both modes: `POST /v1/approvals`,
`GET /v1/approvals/{id}?wait=S` (a long poll of at most 60 s) and `GET /v1/keys` (JWKS).

Every refusal (401, 403, 400, 413) is audited as `plane_refused` and records no request. With
no client in the policy the API answers 404; until the bot is up, 503."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.errors import BadRequest

from ..policy import PlanePolicy
from .asks import MAX_BODY, parse_ask, place
from .desk import PlaneDesk, load_signing_key
from .receipts import jwks

if TYPE_CHECKING:
    from ..runs.service import RunService
    from ..store import Store

__all__ = ["MAX_WAIT", "PlaneRoutes", "plane_desk"]

logger = logging.getLogger("opsgate.plane")

MAX_WAIT = 60.0


async def plane_desk(service: RunService, store: Store, key_file: Path | None) -> PlaneDesk:
    """The desk of a started bot, with the receipts' key (`OPSGATE_RECEIPT_KEY`, else the
    database's)."""
    desk = PlaneDesk(service.ctx, service.cards, await load_signing_key(store, key_file))
    service.ctx.tasks.spawn(desk.keep_opening(), name="plane reopening", service=True)
    return desk


class PlaneRoutes:
    """The routes, on the port from before the bot is up: 503 except while a desk is
    `serving`."""

    def __init__(self, plane: PlanePolicy) -> None:
        self.plane = plane
        self.desk: PlaneDesk | None = None

    @contextlib.contextmanager
    def serving(self, desk: PlaneDesk) -> Iterator[None]:
        """The requests go to `desk` inside the block."""
        self.desk = desk
        try:
            yield
        finally:
            self.desk = None

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/approvals", self.post)
        app.router.add_get("/v1/approvals/{id}", self.get)
        app.router.add_get("/v1/keys", self.keys)

    def _ready(self) -> PlaneDesk:
        if not self.plane.on:
            raise web.HTTPNotFound(text="the approval plane is off: no [plane.clients]\n")
        if self.desk is None:
            raise web.HTTPServiceUnavailable(text="not up yet\n")
        return self.desk

    async def _refuse(
        self, desk: PlaneDesk, status: int, reason: str, client: str | None, **extra: Any
    ) -> web.Response:
        details = {"status": status, "reason": reason, "client": client, **extra}
        await desk.ctx.store.audit("plane_refused", actor=None, details=details)
        return web.json_response({"error": reason, **extra}, status=status)

    def _client(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.plane.client_for(token.strip())

    async def post(self, request: web.Request) -> web.Response:
        desk = self._ready()
        client = self._client(request)
        if client is None:
            return await self._refuse(desk, 401, "unknown or missing token", None)
        if request.content_length is not None and request.content_length > MAX_BODY:
            return await self._refuse(desk, 413, f"body over {MAX_BODY} bytes", client)
        raw = await request.content.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            return await self._refuse(desk, 413, f"body over {MAX_BODY} bytes", client)
        try:
            ask = parse_ask(raw)
            where = place(self.plane, self.plane.clients[client], ask)
        except BadRequest as exc:
            return await self._refuse(
                desk, 400, f"{exc.field}: {exc.problem}", client, field=exc.field
            )
        if isinstance(where, str):
            return await self._refuse(desk, 403, where, client)
        if not desk.ctx.policy.allows_channel(where.channel):
            return await self._refuse(desk, 403, f"OpsGate does not act in {where.channel}", client)
        answer, created = await desk.submit(client, where, ask)
        return web.json_response(answer.as_json(full=False), status=201 if created else 200)

    async def get(self, request: web.Request) -> web.Response:
        desk = self._ready()
        client = self._client(request)
        if client is None:
            return await self._refuse(desk, 401, "unknown or missing token", None)
        try:
            wait = min(MAX_WAIT, max(0.0, float(request.query.get("wait", "0"))))
        except ValueError:
            return await self._refuse(desk, 400, "wait: not a number", client, field="wait")
        record = await desk.ctx.store.plane_request(request.match_info["id"])
        if record is None or record.client != client:
            raise web.HTTPNotFound(text="no such request\n")
        answer = await desk.wait(record.id, wait)
        assert answer is not None
        return web.json_response(answer.as_json())

    async def keys(self, request: web.Request) -> web.Response:
        desk = self._ready()
        return web.json_response(jwks([desk.key.public]))
