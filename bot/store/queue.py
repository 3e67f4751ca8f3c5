"""The run queue (messages waiting for a free slot in their channel, first come first served)
and the inbox (deliveries saved before Slack gets its 200).

Each step that moves a queue item also moves its session (claiming an item starts its run), in
one transaction, so concurrent dispatchers in any number of processes or replicas never exceed
a channel's limit and never start an item twice: `claim_queued` holds a per-channel advisory
lock for its transaction on PostgreSQL, where SQLite's `BEGIN IMMEDIATE` already serialises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .core import StoreCore
from .db import Row, Tx, json_text
from .errors import StoreError
from .models import EnqueueOutcome, InboxKind, QueueItem
from .rules import SEEN_EVENT_TTL

__all__ = ["QUEUE_LOCK", "Queue"]

QUEUE_LOCK = 0x0F5_0E0E
"""First key of the per-channel advisory lock (the second is the channel id's hash)."""

_QUEUED_OF_SESSION = (
    "SELECT * FROM run_queue WHERE session_id = :id AND state = 'queued' ORDER BY id LIMIT 1"
)

_ITEM_OF_MESSAGE = (
    "SELECT * FROM run_queue WHERE session_id = :id AND message_ts = :ts ORDER BY id LIMIT 1"
)

_FIRST_SIGHTING = (
    "INSERT INTO seen_events (event_id, seen_at) VALUES (:key, :now) "
    "ON CONFLICT (event_id) DO NOTHING"
)
"""Claim a dedupe key: one row touched the first time, none after (`first_sighting` too)."""


class Queue(StoreCore):
    async def enqueue(
        self, session_id: str, *, requester: str, text: str, message_ts: str | None = None
    ) -> EnqueueOutcome:
        """Queue a message unless its session is busy (run active or paused, or a message
        already queued); checked and written in one transaction.

        Busy: the session waits for approval, or another message of the thread is already
        queued. A message that comes while the thread's run is going waits for it (one run
        per thread at a time, `docs/architecture.md`): the claim starts it once the session is
        idle again. A message (`message_ts`) already queued once gets its item back, in
        whatever state: a delivery processed again is not a second request."""
        async with self._db.transaction("enqueue") as tx:
            session = self._session_model(await self._session(tx, session_id, lock=True))
            waiting = await tx.fetch_one(_QUEUED_OF_SESSION, {"id": session_id})
            if message_ts is not None and (
                same := await tx.fetch_one(_ITEM_OF_MESSAGE, {"id": session_id, "ts": message_ts})
            ):
                # The message's delivery processed again (its process died after queueing it,
                # before marking the delivery done): its item, never a second run of it.
                return EnqueueOutcome(item=self._queue_model(same), session=session)
            if session.state == "awaiting_approval" or waiting is not None:
                queued = None if waiting is None else self._queue_model(waiting)
                return EnqueueOutcome(item=None, session=session, waiting=queued)
            row = await tx.fetch_one(
                "INSERT INTO run_queue (session_id, channel_id, requester, text, message_ts, "
                "state, enqueued_at) VALUES (:id, :channel, :requester, :text, :ts, 'queued', "
                ":now) RETURNING *",
                {
                    "id": session_id,
                    "channel": session.channel_id,
                    "requester": requester,
                    "text": text,
                    "ts": message_ts,
                    "now": self._now(),
                },
            )
            return EnqueueOutcome(item=self._queue_model(row), session=session)

    async def _start_item(self, tx: Tx, candidate: Row) -> QueueItem | None:
        """Start one candidate under its session's lock; None if it changed meanwhile."""
        session = await self._session(tx, candidate["session_id"], lock=True)
        if session["state"] not in ("idle", "failed"):
            return None
        now = self._now()
        seq = await tx.fetch_value(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = :id",
            {"id": session["id"]},
        )
        row = await tx.fetch_one(
            "UPDATE run_queue SET state = 'started', started_at = :now, "
            "history_seq = COALESCE(history_seq, :seq), instance_id = :instance "
            "WHERE id = :id AND state = 'queued' RETURNING *",
            {"now": now, "seq": int(seq), "instance": self._instance_id, "id": candidate["id"]},
        )
        if row is None:
            return None
        await tx.execute(
            "UPDATE sessions SET state = 'running', requester = :requester, error = NULL, "
            "instance_id = :instance, updated_at = :now WHERE id = :id",
            {
                "requester": row["requester"],
                "instance": self._instance_id,
                "now": now,
                "id": session["id"],
            },
        )
        rerun = int(row["history_seq"]) < int(seq)  # its message is stored already
        return self._queue_model(row).model_copy(update={"rerun": rerun})

    async def claim_queued(self, channel_id: str, *, limit: int) -> QueueItem | None:
        """Start the channel's oldest queued item if fewer than `limit` of its sessions are
        running or resuming: conditional, in one transaction with the session's idle|failed ->
        running (requester set). Never exceeds the limit or starts an item twice."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit!r}")
        async with self._db.transaction("claim_queued") as tx:
            await self._db.advisory_lock(tx, QUEUE_LOCK, channel_id)
            busy = await tx.fetch_value(
                "SELECT COUNT(*) FROM sessions WHERE channel_id = :channel "
                "AND state IN ('running', 'resuming')",
                {"channel": channel_id},
            )
            if int(busy) >= limit:
                return None
            candidates = await tx.fetch_all(
                "SELECT q.id, q.session_id FROM run_queue AS q "
                "JOIN sessions AS s ON s.id = q.session_id WHERE q.channel_id = :channel "
                "AND q.state = 'queued' AND s.state IN ('idle', 'failed') ORDER BY q.id LIMIT 3",
                {"channel": channel_id},
            )
            for candidate in candidates:
                started = await self._start_item(tx, candidate)
                if started is not None:
                    return started
            return None

    async def release_queued(self, item_id: int) -> None:
        """Undo `claim_queued` for a run that could not start (shutting down)."""
        async with self._db.transaction("release_queued") as tx:
            row = await tx.fetch_one("SELECT * FROM run_queue WHERE id = :id", {"id": item_id})
            if row is None or row["state"] != "started":
                return
            await self._session(tx, row["session_id"], lock=True)
            stored = await tx.fetch_value(  # a rerun's message: kept, never added again
                "SELECT 1 FROM messages WHERE session_id = :id AND seq >= :seq LIMIT 1",
                {"id": row["session_id"], "seq": row["history_seq"]},
            )
            touched = await tx.execute(
                "UPDATE run_queue SET state = 'queued', started_at = NULL, "
                f"history_seq = {'history_seq' if stored else 'NULL'}, "
                "instance_id = NULL WHERE id = :id AND state = 'started'",
                {"id": item_id},
            )
            if touched == 0:
                return
            await tx.execute(
                "UPDATE sessions SET state = 'idle', instance_id = NULL, updated_at = :now "
                "WHERE id = :id AND state = 'running'",
                {"now": self._now(), "id": row["session_id"]},
            )

    async def queue_unmarked(self, item_id: int, unmarked: bool) -> None:
        """Whether the item's message went without the working mark (Slack's budget for it was
        spent), for whoever unmarks it after a crash: a removal of a mark never made is a
        workspace-wide Tier 3 call spent for nothing."""
        async with self._db.transaction("record a queued message's mark") as tx:
            await tx.execute(
                "UPDATE run_queue SET unmarked = :unmarked WHERE id = :id",
                {"unmarked": unmarked, "id": item_id},
            )

    async def finish_queued(self, item_id: int) -> None:
        """The item's run ended (answered, failed or paused)."""
        async with self._db.transaction("finish_queued") as tx:
            await tx.execute(
                "UPDATE run_queue SET state = 'done', finished_at = :now "
                "WHERE id = :id AND state = 'started'",
                {"now": self._now(), "id": item_id},
            )

    async def cancel_queued(self, session_id: str, *, user_id: str) -> QueueItem | None:
        """Withdraw the thread's queued message (audited "cancel"); None if none waits."""
        async with self._db.transaction("cancel_queued") as tx:
            await self._session(tx, session_id, lock=True)
            waiting = await tx.fetch_one(_QUEUED_OF_SESSION, {"id": session_id})
            if waiting is None:
                return None
            row = await tx.fetch_one(
                "UPDATE run_queue SET state = 'cancelled', finished_at = :now "
                "WHERE id = :id AND state = 'queued' RETURNING *",
                {"now": self._now(), "id": waiting["id"]},
            )
            if row is None:
                raise StoreError(f"queue item {waiting['id']!r} changed under cancel_queued")
            await self._write_audit(
                tx,
                "cancel",
                actor=user_id,
                session_id=session_id,
                details={"queue_item": row["id"], "requester": row["requester"], "via": "queue"},
            )
            return self._queue_model(row)

    async def queued_item(self, session_id: str) -> QueueItem | None:
        async with self._db.reading("queued_item") as tx:
            row = await tx.fetch_one(_QUEUED_OF_SESSION, {"id": session_id})
        return None if row is None else self._queue_model(row)

    async def queue_position(self, item_id: int) -> int | None:
        """How many of the channel's items are queued ahead; None if no longer queued."""
        async with self._db.reading("queue_position") as tx:
            row = await tx.fetch_one("SELECT * FROM run_queue WHERE id = :id", {"id": item_id})
            if row is None or row["state"] != "queued":
                return None
            ahead = await tx.fetch_value(
                "SELECT COUNT(*) FROM run_queue WHERE channel_id = :channel AND state = 'queued' "
                "AND id < :id",
                {"channel": row["channel_id"], "id": item_id},
            )
        return int(ahead)

    async def queue_items(
        self, *, channel_id: str | None = None, states: Collection[str] | None = None
    ) -> list[QueueItem]:
        sql, params = "SELECT * FROM run_queue WHERE 1 = 1", dict[str, Any](channel=channel_id)
        if channel_id is not None:
            sql += " AND channel_id = :channel"
        if states is not None:
            wanted = sorted(states)
            if not wanted:
                return []
            sql += f" AND state IN ({', '.join(f':s{i}' for i in range(len(wanted)))})"
            params.update({f"s{i}": state for i, state in enumerate(wanted)})
        async with self._db.reading("queue_items") as tx:
            rows = await tx.fetch_all(sql + " ORDER BY id", params)
        return [self._queue_model(row) for row in rows]

    async def queued_channels(self) -> list[str]:
        """Channels with messages waiting, the longest-waiting first."""
        async with self._db.reading("queued_channels") as tx:
            rows = await tx.fetch_all(
                "SELECT channel_id FROM run_queue WHERE state = 'queued' "
                "GROUP BY channel_id ORDER BY MIN(id)"
            )
        return [str(row[0]) for row in rows]

    # -- the inbox ---------------------------------------------------------------------------------

    async def inbox_add(
        self, kind: InboxKind, payload: Mapping[str, Any], *, keys: Sequence[str] = ()
    ) -> int | None:
        # Deliveries that arrive while one is being saved are saved together, in one
        # transaction: a burst of mentions costs a few fsyncs, not one each.
        """Save a delivery before it is acknowledged, owned by this store (its replica).

        `keys` are dedupe keys (event id, channel and ts): in the same transaction each is
        claimed as `first_sighting` does, and if any was seen before nothing is saved and the
        answer is None. A crash therefore never leaves a key claimed with nothing saved.
        Returns the row's id."""
        group = self.__dict__.get("_inbox_group")
        if group is None:
            group = self.__dict__["_inbox_group"] = _GroupCommit(self._add_all)
        return await group.submit((kind, dict(payload), tuple(keys)))

    async def _add_all(self, adds: Sequence[_Add]) -> list[int | None]:
        moment = self._moment()
        now = self._db.time_in(moment)
        ids: list[int | None] = [None] * len(adds)
        async with self._db.transaction("inbox_add") as tx:
            await tx.execute(
                "DELETE FROM seen_events WHERE seen_at < :before",
                {"before": self._db.time_in(moment - SEEN_EVENT_TTL)},
            )
            # The group's keys are claimed in a statement or two, not one each: the group
            # holds the connection (and each statement waits its turn on a busy loop) for as
            # long as its statements take, while the next group's deliveries wait for it.
            unclaimed = await self._claim_keys(tx, [k for _, _, keys in adds for k in keys], now)
            saving: list[int] = []
            for n, (_, _, keys) in enumerate(adds):
                # Saved if every key is the group's first sighting and no earlier delivery of
                # the group took it: as if each delivery had claimed its keys alone, in order.
                if unclaimed.issuperset(keys):
                    unclaimed.difference_update(keys)
                    saving.append(n)
            rows = await self._insert_rows(tx, [adds[n][:2] for n in saving], now)
            for n, item_id in zip(saving, rows, strict=True):
                ids[n] = item_id
            # Keys claimed for deliveries that were refused (another of their keys was seen
            # before) are released, as a rollback of that delivery alone would.
            await self._release_keys(tx, sorted(unclaimed))
            saved = [i for i in ids if i is not None]
            if saved and any(kind == "request" for kind, _, _ in adds):
                # Every request Slack sends is a row (the one intake): done ones are kept for a
                # while to look at, then deleted as new ones come (the (state, id) index finds
                # them; their dedupe keys live on in seen_events for SEEN_EVENT_TTL).
                await tx.execute(
                    "DELETE FROM inbox WHERE state = 'done' AND id <= :oldest AND kind = 'request'",
                    {"oldest": max(saved) - REQUESTS_KEPT},
                )
        return ids

    async def _claim_keys(self, tx: Tx, keys: Sequence[str], now: Any) -> set[str]:
        """The keys seen here for the first time (claimed now); a key named twice is claimed
        once. In sorted order: two replicas' groups naming the same keys wait for each other's
        in one order, never in a cycle (PostgreSQL would abort one as a deadlock)."""
        claimed: set[str] = set()
        unique = sorted(set(keys))
        for start in range(0, len(unique), _KEYS_PER_STATEMENT):
            chunk = unique[start : start + _KEYS_PER_STATEMENT]
            values = ", ".join(f"(:k{i}, :now)" for i in range(len(chunk)))
            rows = await tx.fetch_all(
                f"INSERT INTO seen_events (event_id, seen_at) VALUES {values} "
                "ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
                {"now": now, **{f"k{i}": key for i, key in enumerate(chunk)}},
            )
            claimed.update(str(row[0]) for row in rows)
        return claimed

    async def _release_keys(self, tx: Tx, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), _KEYS_PER_STATEMENT):
            chunk = keys[start : start + _KEYS_PER_STATEMENT]
            names = ", ".join(f":k{i}" for i in range(len(chunk)))
            await tx.execute(
                f"DELETE FROM seen_events WHERE event_id IN ({names})",
                {f"k{i}": key for i, key in enumerate(chunk)},
            )

    async def _insert_rows(
        self, tx: Tx, rows: Sequence[tuple[InboxKind, dict[str, Any]]], now: Any
    ) -> list[int]:
        """The new rows' ids, in the order given: a statement per `_ROWS_PER_STATEMENT`, not one
        each. RETURNING comes in no promised order, so its rows are told apart by what they
        hold; rows that hold the same are interchangeable."""
        ids: list[int] = []
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            chunk = rows[start : start + _ROWS_PER_STATEMENT]
            one = "(:kind{0}, :payload{0}, :instance, :now)"
            values = ", ".join(one.format(i) for i in range(len(chunk)))
            params: dict[str, Any] = {"instance": self._instance_id, "now": now}
            for i, (kind, payload) in enumerate(chunk):
                params[f"kind{i}"], params[f"payload{i}"] = kind, self._db.json_in(payload)
            returned = await tx.fetch_all(
                "INSERT INTO inbox (kind, payload, instance_id, received_at) "
                f"VALUES {values} RETURNING id, kind, payload",
                params,
            )
            by_content: dict[tuple[str, str], list[int]] = {}
            for row in sorted(returned, key=lambda r: int(r[0])):
                held = _content(row[1], self._db.json_out(row[2]))
                by_content.setdefault(held, []).append(int(row[0]))
            for kind, payload in chunk:
                same = by_content.get(_content(kind, payload))
                if not same:
                    raise StoreError(f"inbox_add: a saved {kind!r} row was not returned")
                ids.append(same.pop(0))
        return ids

    async def inbox_done(self, item_id: int) -> None:
        """The row was processed (its run queued, or it was answered); it is not recovered."""
        async with self._db.transaction("inbox_done") as tx:
            await tx.execute(
                "UPDATE inbox SET state = 'done', done_at = :now WHERE id = :id",
                {"now": self._now(), "id": item_id},
            )


_KEYS_PER_STATEMENT = 500
"""Keys claimed per statement (two parameters each: within both databases' limits)."""
_ROWS_PER_STATEMENT = 250
"""Rows inserted per statement (two parameters each, and two shared)."""


def _content(kind: Any, payload: Any) -> tuple[str, str]:
    """What tells a saved row apart from the others of its statement."""
    return str(kind), json_text(payload)  # as saved: keys sorted, lone surrogates replaced


_GATHER_STEPS = 20
"""The most loop steps a group waits for more deliveries (each step runs what is ready)."""

REQUESTS_KEPT = 10_000
"""Done `request` rows kept (the newest); older ones are deleted as requests come in."""


_Add = tuple[InboxKind, dict[str, Any], tuple[str, ...]]
"""One delivery to save: its kind, payload and dedupe keys."""


@dataclass
class _Waiting:
    add: _Add
    result: int | None = None
    error: Exception | None = None
    done: bool = False
    settled: asyncio.Event = field(default_factory=asyncio.Event)


class _GroupCommit:
    """Group commit: whoever holds the lock saves every delivery waiting, its own among
    them, in one transaction; the others find theirs saved when they get the lock.

    Cancelled while waiting in line, a delivery leaves the line. Cancelled while another
    caller's transaction holds it, it waits for that transaction: a delivery that was saved
    is answered with its id even so (a caller that gave up must learn that it was saved, to
    mark it done); one that was not re-raises the cancellation. A transaction cut short rolled
    back, so the others' deliveries go back in the line."""

    def __init__(self, commit: Callable[[Sequence[_Add]], Awaitable[list[int | None]]]) -> None:
        self._commit = commit
        self._lock = asyncio.Lock()
        self._waiting: list[_Waiting] = []

    async def submit(self, add: _Add) -> int | None:
        mine = _Waiting(add)
        self._waiting.append(mine)
        try:
            async with self._lock:
                if not mine.done:
                    await self._gather()
                    await self._save_waiting(mine)
        except asyncio.CancelledError:
            if mine in self._waiting:
                self._waiting.remove(mine)
                raise
            await asyncio.shield(mine.settled.wait())
            if mine in self._waiting:  # that transaction was cut short: nothing saved
                self._waiting.remove(mine)
            if mine.result is None:
                raise
        if mine.error is not None:
            raise mine.error
        return mine.result

    async def _gather(self) -> None:
        """Let the deliveries on their way join before the line is taken: the requests of a
        burst reach the inbox a loop step or a few apart, and the first one would otherwise
        commit alone, the rest waiting for its fsync. While the line grows, up to
        `_GATHER_STEPS` steps of the loop; a lone delivery waits one."""
        for _ in range(_GATHER_STEPS):
            before = len(self._waiting)
            await asyncio.sleep(0)
            if len(self._waiting) == before:
                return

    async def _save_waiting(self, mine: _Waiting) -> None:
        group, self._waiting = self._waiting, []
        try:
            results = await self._commit([w.add for w in group])
        except Exception as exc:
            for waiting in group:
                waiting.error, waiting.done = exc, True
                waiting.settled.set()
            return
        except BaseException:
            # Cut short (cancelled): rolled back. The others go back in line (one cancelled
            # meanwhile leaves it when it wakes); `mine` is the caller's and goes nowhere.
            self._waiting[:0] = [w for w in group if w is not mine]
            for waiting in group:
                waiting.settled.set()
            raise
        for waiting, result in zip(group, results, strict=True):
            waiting.result, waiting.done = result, True
            waiting.settled.set()
