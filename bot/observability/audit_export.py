"""The audit webhook: every audit row POSTed to a collector (a SIEM), in seq order, at least
once, from a cursor kept in the database.

It runs as one background task the server owns, reading the rows the store already wrote, so
a decision never waits for the collector: a collector that is down only makes the export lag
(`opsgate_audit_export_lag_seconds`) and fail (`opsgate_audit_export_failures_total`), and after
`[audit] unready_after` failures in a row `/readyz` names it. Each delivery is a JSON array of
rows exactly as `opsgate audit --json` prints them (with `seq`, `prev_hash`, `hash`), so the
collector can verify the chain and drop the duplicates a retry brings (same `hash`). A row the
store cannot read (edited by hand) is delivered as `opsgate audit --json` prints it too (its
`id`, `seq` and `unreadable`: why), with a warning: the collector sees the break, and the rows
after it still flow. Replicas share the export through a lease in the cursor's row: one posts
at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from ..store import Store, StoreError
from ..store.chain import Unreadable, printed
from ..store.db import utc_now
from .health import ReadinessCheck

__all__ = ["AuditExportObserver", "AuditExporter", "ExportSettings"]

logger = logging.getLogger("opsgate.audit")

POLL = 1.0
"""Seconds between looks for new rows once the export caught up."""
LEASE = timedelta(seconds=30)
"""How long a replica holds the export without renewing it (it renews before each delivery)."""
TIMEOUT = 10.0


class AuditExportObserver(Protocol):
    """Hears how the export goes (`bot.observability.Metrics`)."""

    def audit_export_failed(self) -> None: ...

    def set_audit_export_lag(self, seconds: float) -> None: ...


class ExportSettings(Protocol):
    """`[audit]` as the exporter reads it (`bot.policy.AuditPolicy` is one): the layer that
    serves the export needs the values, not the policy that validated them."""

    @property
    def webhook(self) -> str | None: ...
    @property
    def batch(self) -> int: ...
    @property
    def retry_max(self) -> timedelta: ...
    @property
    def unready_after(self) -> int: ...


class AuditExporter:
    """Delivers the audit log to `policy.webhook`; `run()` until cancelled."""

    def __init__(
        self,
        store: Store,
        policy: ExportSettings,
        observer: AuditExportObserver,
        *,
        clock: Callable[[], datetime] = utc_now,
        poll: float = POLL,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if policy.webhook is None:
            raise ValueError("the audit exporter needs [audit] webhook")
        self._store = store
        self._url = policy.webhook
        self._policy = policy
        self._observer = observer
        self._clock = clock
        self._poll = poll
        self._transport = transport
        self._holder = f"export {secrets.token_hex(6)}"
        self.failures = 0
        """Failed deliveries in a row (0 after a success)."""
        self._stopping = asyncio.Event()
        self._last_error = ""
        parts = urlsplit(self._url)
        self._where = f"{parts.scheme}://{parts.netloc}"
        """The collector as logs and /readyz name it: never its path or query (tokens)."""

    def readiness(self) -> ReadinessCheck:
        async def check() -> str | None:
            if self.failures < self._policy.unready_after:
                return None
            return (
                f"{self.failures} deliveries to {self._where} failed in a row ({self._last_error})"
            )

        return check

    def stop(self) -> None:
        """End `run()` at its next pause (cancelling its task works too)."""
        self._stopping.set()

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=TIMEOUT, transport=self._transport) as http:
            try:
                while not self._stopping.is_set():
                    wait = await self._step(http)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), wait)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._store.release_audit_export(self._holder))

    async def _step(self, http: httpx.AsyncClient) -> float:
        """One look and at most one delivery; the seconds to wait before the next."""
        try:
            delivered = await self._store.claim_audit_export(self._holder, LEASE)
            if delivered is None:  # another replica exports
                return self._poll
            rows = await self._store.audit_entries(after_seq=delivered, limit=self._policy.batch)
        except StoreError as exc:
            logger.warning("audit export: cannot read the log: %s", exc)
            return self._poll
        for row in rows:
            if isinstance(row, Unreadable):
                logger.warning("audit export: seq %s cannot be read: %s", row.seq, row.why)
        times = [row.at for row in rows if not isinstance(row, Unreadable)]
        lag = (self._clock() - times[0]).total_seconds() if times else 0.0
        self._observer.set_audit_export_lag(max(0.0, lag))
        if not rows:
            return self._poll
        body = json.dumps([printed(row) for row in rows], ensure_ascii=False).encode()
        try:
            response = await http.post(
                self._url, content=body, headers={"Content-Type": "application/json"}
            )
            ok = response.is_success
            self._last_error = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            ok, self._last_error = False, type(exc).__name__
        seqs = [row.seq for row in rows if row.seq is not None]
        if not ok:
            return self._failed(seqs[0] if seqs else delivered + 1)
        self.failures = 0
        try:
            await self._store.audit_exported(self._holder, seqs[-1] if seqs else delivered)
        except StoreError as exc:  # delivered again later: at least once
            logger.warning("audit export: cannot move the cursor: %s", exc)
            return self._poll
        return 0.0

    def _failed(self, seq: int) -> float:
        self.failures += 1
        self._observer.audit_export_failed()
        wait = min(self._policy.retry_max.total_seconds(), 2.0 ** (self.failures - 1))
        logger.warning(
            "audit export to %s failed at seq %d (%s); again in %gs",
            self._where,
            seq,
            self._last_error,
            wait,
        )
        return wait
