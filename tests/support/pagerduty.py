"""A local stand-in of PagerDuty's REST API: `GET /oncalls` for the schedules a test sets,
with the token checked, and a switch that makes it unreachable (HTTP 503)."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from aiohttp import web

from tests.support.loopback import serve_on_loopback

__all__ = ["PagerDutyStandIn"]


class PagerDutyStandIn:
    def __init__(self, token: str = "pd-test-token") -> None:
        self.token = token
        self.oncall: dict[str, str] = {}
        """Schedule id -> the on-call user's email."""
        self.down = False
        self.requests: list[dict[str, str]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_get("/oncalls", self._oncalls)
        self._runner, self.url = await serve_on_loopback(app)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _oncalls(self, request: web.Request) -> web.Response:
        self.requests.append(dict(request.query))
        if self.down:
            return web.json_response({"error": {"message": "unavailable"}}, status=503)
        if request.headers.get("Authorization") != f"Token token={self.token}":
            return web.json_response({"error": {"message": "Unauthorized"}}, status=401)
        schedule = request.query.get("schedule_ids[]", "")
        email = self.oncall.get(schedule)
        oncalls = []
        if email is not None and request.query.get("earliest") == "true":
            user = {"id": "P" + email.split("@")[0].upper(), "type": "user", "email": email}
            oncalls.append({"user": user, "schedule": {"id": schedule}, "escalation_level": 1})
        return web.json_response({"oncalls": oncalls})
