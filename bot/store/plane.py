"""Requests from outside automation (the approval plane): one row per request, and the
receipts' signing key.

A request that needs a person is also a session whose paused batch is the one call (the
ledger holds its decision); the row says who asked and that OpsGate does not run it. The
idempotency key is unique per client, so a repeated request finds the first one's row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .core import StoreCore
from .db import Row, Tx
from .rules import new_id

__all__ = ["PlaneRequest", "PlaneRows", "PlaneState"]

PlaneState = Literal["pending", "forbidden", "allowed"]
"""A request's state when it was recorded; a pending one's decision is its ledger row's."""


class PlaneRequest(BaseModel):
    """One outside request as recorded."""

    model_config = ConfigDict(frozen=True)

    id: str
    client: str
    idempotency_key: str | None = None
    tool: str
    arguments: str
    """Canonical JSON of the arguments."""
    digest: str
    channel_id: str
    requester: str | None = None
    reason: str | None = None
    state: PlaneState
    rule: str | None = None
    session_id: str | None = None
    created_at: datetime


class PlaneRows(StoreCore):
    async def plane_record(
        self, request: PlaneRequest, *, audit: dict[str, Any]
    ) -> tuple[PlaneRequest, bool]:
        """Record `request` (its id is replaced by a new one) and audit `plane_request`, once:
        a request with the same client and idempotency key returns the first, and False."""
        [recorded] = await self.plane_record_many([(request, audit)])
        return recorded

    async def plane_record_many(
        self, requests: Sequence[tuple[PlaneRequest, dict[str, Any]]]
    ) -> list[tuple[PlaneRequest, bool]]:
        """`plane_record` of each, in one transaction (a burst's group commit)."""
        out: list[tuple[PlaneRequest, bool]] = []
        async with self._db.transaction("plane_record") as tx:
            for request, audit in requests:
                out.append(await self._record_one(tx, request, audit))
        return out

    async def _record_one(
        self, tx: Tx, request: PlaneRequest, audit: dict[str, Any]
    ) -> tuple[PlaneRequest, bool]:
        values = request.model_dump()
        values |= {"id": new_id(), "created_at": self._now(), "opening_at": self._now()}
        touched = await tx.execute(
            "INSERT INTO plane_requests (id, client, idempotency_key, tool, arguments, digest, "
            "channel_id, requester, reason, state, rule, session_id, created_at, opening_at) "
            "VALUES (:id, :client, :idempotency_key, :tool, :arguments, :digest, :channel_id, "
            ":requester, :reason, :state, :rule, :session_id, :created_at, :opening_at) "
            "ON CONFLICT (client, idempotency_key) DO NOTHING",
            values,
        )
        if touched == 0:
            row = await tx.fetch_one(
                "SELECT * FROM plane_requests WHERE client = :client AND idempotency_key = :key",
                {"client": request.client, "key": request.idempotency_key},
            )
            assert row is not None
            return self._plane_model(row), False
        details = {"request": values["id"], **audit}
        await self._write_audit(tx, "plane_request", actor=request.requester, details=details)
        return request.model_copy(update={"id": values["id"]}), True

    async def plane_attach(self, request_id: str, session_id: str) -> None:
        """The request's session, before its batch is recorded (so no run resumes it)."""
        async with self._db.transaction("plane_attach") as tx:
            await tx.execute(
                "UPDATE plane_requests SET session_id = :session WHERE id = :id",
                {"session": session_id, "id": request_id},
            )

    async def plane_unopened(self, older_than: timedelta) -> list[PlaneRequest]:
        """Pending requests whose opening began more than `older_than` ago and never reached
        their batch (the process opening them died): no ledger row holds their call."""
        before = self._db.time_in(self._moment() - older_than)
        async with self._db.reading("plane_unopened") as tx:
            rows = await tx.fetch_all(
                "SELECT * FROM plane_requests AS p WHERE p.state = 'pending' "
                "AND p.opening_at < :before AND NOT EXISTS (SELECT 1 FROM tool_calls AS t "
                "WHERE t.session_id = p.session_id) ORDER BY p.created_at",
                {"before": before},
            )
        return [self._plane_model(row) for row in rows]

    async def plane_claim_opening(self, request: PlaneRequest, older_than: timedelta) -> bool:
        """Claim the opening of a request `plane_unopened` returned: of any number of callers,
        one wins until `older_than` has passed again."""
        before = self._db.time_in(self._moment() - older_than)
        async with self._db.transaction("plane_claim_opening") as tx:
            touched = await tx.execute(
                "UPDATE plane_requests SET opening_at = :now WHERE id = :id "
                "AND opening_at < :before",
                {"now": self._now(), "id": request.id, "before": before},
            )
        return touched == 1

    async def plane_request(self, request_id: str) -> PlaneRequest | None:
        """The outside request with that id, if any."""
        async with self._db.reading("plane_request") as tx:
            row = await tx.fetch_one(
                "SELECT * FROM plane_requests WHERE id = :id", {"id": request_id}
            )
        return None if row is None else self._plane_model(row)

    async def plane_of_session(self, session_id: str) -> PlaneRequest | None:
        """The outside request a session holds; None for an agent's own session."""
        async with self._db.reading("plane_of_session") as tx:
            row = await tx.fetch_one(
                "SELECT * FROM plane_requests WHERE session_id = :id", {"id": session_id}
            )
        return None if row is None else self._plane_model(row)

    async def plane_signing_key(self, make: Callable[[], str]) -> str:
        """The receipts' signing key (PEM), made by `make` the first time; every store on the
        database gets the same one (the first writer wins)."""
        async with self._db.transaction("plane_signing_key") as tx:
            await tx.execute(
                "INSERT INTO plane_keys (name, pem, created_at) VALUES ('receipts', :pem, :now) "
                "ON CONFLICT (name) DO NOTHING",
                {"pem": make(), "now": self._now()},
            )
            pem = await tx.fetch_value("SELECT pem FROM plane_keys WHERE name = 'receipts'")
        return str(pem)

    def _plane_model(self, row: Row) -> PlaneRequest:
        data = dict(row)
        data["created_at"] = self._db.time_out(data["created_at"])
        return PlaneRequest.model_validate(data)
