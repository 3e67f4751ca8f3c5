"""The append-only audit log, the memory of Slack event ids that dedupes retries, the write
probe, who opened the Home tab lately, and the models' learned context windows.

Small facts the bot keeps beside its runs: each is one row written in one statement or two, and
shared by every process and replica on the database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from .chain import GENESIS, AuditEntry, RecordedHead, Unreadable
from .core import StoreCore
from .db import Row, aware
from .errors import StoreError
from .models import AuditRow, HomeViewer
from .queue import _FIRST_SIGHTING
from .rules import HOME_VIEWERS_KEPT, PROBE_EVENT_ID, SEEN_EVENT_TTL

__all__ = ["Audit"]


class Audit(StoreCore):
    async def audit(
        self,
        event: str,
        *,
        actor: str | None,
        session_id: str | None = None,
        call_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one row to the audit log, which is append-only and chained: the row gets
        the next `seq` and its `hash` (`bot/store/chain.py`), in the caller's transaction.

        Append-only: triggers refuse updates and deletes (and, on PostgreSQL, truncation)."""
        async with self._db.transaction("audit") as tx:
            await self._write_audit(
                tx, event, actor=actor, session_id=session_id, call_id=call_id, details=details
            )

    async def audit_rows(
        self,
        *,
        since: datetime | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[AuditRow]:
        """Audit rows in the order written, from `since` on if given, past `after_seq` (the
        follower's and the exporter's cursor), at most `limit`. A row that cannot be read
        (edited by hand) raises `StoreError` naming its seq.

        The rows; a row that cannot be read (edited by hand) raises `StoreError` naming its
        seq (`audit_entries` lists it instead)."""
        rows = []
        for entry in await self.audit_entries(since=since, after_seq=after_seq, limit=limit):
            if isinstance(entry, Unreadable):
                raise StoreError(
                    f"audit row seq {entry.seq} (id {entry.id}) cannot be read: {entry.why}"
                )
            rows.append(entry)
        return rows

    async def audit_entries(
        self,
        *,
        since: datetime | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[AuditEntry]:
        """As `audit_rows`, but a row that cannot be read is listed as `Unreadable` (its id,
        its seq if that can be read, and why), so readers print and verify the others."""
        where, params = ["1 = 1"], dict[str, Any]()
        if after_seq is not None:
            where.append("seq > :after")
            params["after"] = after_seq
        if since is not None:
            where.append("at >= :since")
            params["since"] = self._db.time_in(aware(since))
        tail = "" if limit is None else f" LIMIT {int(limit)}"
        async with self._db.reading("audit_rows") as tx:
            rows = await tx.fetch_all(
                f"SELECT * FROM audit WHERE {' AND '.join(where)} ORDER BY id{tail}", params
            )
        return [self._audit_entry(row) for row in rows]

    def _audit_entry(self, row: Row) -> AuditEntry:
        """The row, or what makes it unreadable: one bad row never hides the others."""
        try:
            return self._audit_model(row)
        except (ValidationError, ValueError, TypeError) as exc:
            return Unreadable(_int_or_none(row["id"]), _int_or_none(row["seq"]), _unreadable(exc))

    async def audit_chain_head(self) -> tuple[int, str]:
        """The seq and hash the chain head records (0 and 64 zeros for an empty log)."""
        head = await self.audit_head()
        return head.seq, head.hash

    async def audit_head(self) -> RecordedHead:
        """The chain head as recorded: seq, hash and the key fingerprint (None: not keyed)."""
        async with self._db.reading("audit_chain_head") as tx:
            head = await tx.fetch_one("SELECT seq, hash, key_fingerprint FROM audit_chain")
        if head is None:
            return RecordedHead(0, GENESIS, None)
        keyed = head["key_fingerprint"]
        return RecordedHead(
            int(head["seq"]), str(head["hash"]), None if keyed is None else str(keyed)
        )

    # -- the export's cursor (`bot/observability/audit_export.py`) --------------------------------

    async def claim_audit_export(self, holder: str, lease: timedelta) -> int | None:
        """Hold (or renew) the audit export for `lease`, so one process delivers at a time;
        the last delivered seq, or None while another holder's lease runs."""
        moment = self._moment()
        async with self._db.transaction("claim_audit_export") as tx:
            touched = await tx.execute(
                "UPDATE audit_export SET holder = :holder, held_until = :until "
                "WHERE holder IS NULL OR holder = :holder OR held_until < :now",
                {
                    "holder": holder,
                    "until": self._db.time_in(moment + lease),
                    "now": self._db.time_in(moment),
                },
            )
            if touched != 1:
                return None
            return int(await tx.fetch_value("SELECT delivered_seq FROM audit_export"))

    async def audit_exported(self, holder: str, seq: int) -> bool:
        """Move the cursor forward to `seq` (delivered); False if `holder` lost the export."""
        async with self._db.transaction("audit_exported") as tx:
            touched = await tx.execute(
                "UPDATE audit_export SET delivered_seq = :seq "
                "WHERE holder = :holder AND delivered_seq < :seq",
                {"seq": seq, "holder": holder},
            )
        return touched == 1

    async def release_audit_export(self, holder: str) -> None:
        """Give the export up (shutdown), so another replica takes it at once."""
        async with self._db.transaction("release_audit_export") as tx:
            await tx.execute(
                "UPDATE audit_export SET holder = NULL, held_until = NULL WHERE holder = :holder",
                {"holder": holder},
            )

    async def first_sighting(self, event_id: str) -> bool:
        """True the first time an event id is seen, across all stores; forgets after
        `SEEN_EVENT_TTL`."""
        moment = self._moment()
        async with self._db.transaction("first_sighting") as tx:
            await tx.execute(
                "DELETE FROM seen_events WHERE seen_at < :before",
                {"before": self._db.time_in(moment - SEEN_EVENT_TTL)},
            )
            touched = await tx.execute(
                _FIRST_SIGHTING, {"key": event_id, "now": self._db.time_in(moment)}
            )
        return touched == 1

    async def probe_write(self) -> None:
        """Write (and overwrite) one probe row: `/readyz` asks whether the database accepts
        writes. Raises `StoreError` (or the driver's error) when it does not."""
        async with self._db.transaction("probe_write") as tx:
            await tx.execute(
                "INSERT INTO seen_events (event_id, seen_at) VALUES (:key, :now) "
                "ON CONFLICT (event_id) DO UPDATE SET seen_at = excluded.seen_at",
                {"key": PROBE_EVENT_ID, "now": self._now()},
            )

    # -- the Home tab ----------------------------------------------------------------------------

    async def home_opened(self, user_id: str, team_id: str | None = None) -> None:
        """Remember that `user_id` opened the Home tab now; only the `HOME_VIEWERS_KEPT` most
        recent are kept."""
        async with self._db.transaction("home_opened") as tx:
            await tx.execute(
                "INSERT INTO home_viewers (user_id, team_id, opened_at) "
                "VALUES (:user, :team, :now) ON CONFLICT (user_id) DO UPDATE SET "
                "team_id = excluded.team_id, opened_at = excluded.opened_at",
                {"user": user_id, "team": team_id, "now": self._now()},
            )
            await tx.execute(
                "DELETE FROM home_viewers WHERE user_id NOT IN (SELECT user_id FROM "
                "home_viewers ORDER BY opened_at DESC, user_id LIMIT :kept)",
                {"kept": HOME_VIEWERS_KEPT},
            )

    async def home_viewers(self) -> list[HomeViewer]:
        """Who opened the Home tab lately, most recent first."""
        async with self._db.reading("home_viewers") as tx:
            rows = await tx.fetch_all(
                "SELECT user_id, team_id FROM home_viewers ORDER BY opened_at DESC, user_id"
            )
        return [HomeViewer(user_id=r["user_id"], team_id=r["team_id"]) for r in rows]

    # -- context windows ---------------------------------------------------------------------------

    async def context_window(self, model: str) -> int | None:
        """The context window learned for `model`, in tokens; None if none was learned."""
        async with self._db.reading("context_window") as tx:
            tokens = await tx.fetch_value(
                "SELECT tokens FROM context_windows WHERE model = :model", {"model": model}
            )
        return None if tokens is None else int(tokens)

    async def remember_context_window(self, model: str, tokens: int) -> None:
        """Remember `model`'s context window (tokens > 0) for every process and replica;
        the last writer wins."""
        if tokens < 1:
            raise ValueError(f"a context window of {tokens!r} tokens for {model!r} is not one")
        async with self._db.transaction("remember_context_window") as tx:
            await tx.execute(
                "INSERT INTO context_windows (model, tokens, learned_at) "
                "VALUES (:model, :tokens, :now) ON CONFLICT (model) DO UPDATE SET "
                "tokens = excluded.tokens, learned_at = excluded.learned_at",
                {"model": model, "tokens": tokens, "now": self._now()},
            )


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _unreadable(exc: Exception) -> str:
    """What is wrong with the row, in one line (pydantic's first error, without its URL)."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the row"
        return f"{where}: {first['msg']}"
    if isinstance(exc, json.JSONDecodeError):
        return f"details: not JSON ({exc})"
    return f"{type(exc).__name__}: {exc}"
