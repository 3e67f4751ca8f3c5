"""The durable sender: delivers the outbox's rows (`bot.store.outbox`) to Slack, exactly once.

`SlackThreadOutput` puts a row for each write it owes Slack (notices, card redraws, reactions,
Home tabs, ephemeral replies, files) and returns; this sender, one owned task per process,
claims rows best priority first (cards and their redraws, then answers, notices, Home tabs and
reactions), sends each through the paced client (`bot.slack.pacing`: its turn at Slack's tier,
429s waited out), and deletes the row once Slack said ok. Rows left by a restart, or by a
replica that died (its lease lapsed), are sent by whoever is alive. An intent row (a method of
`renderers`, e.g. `CARD_REDRAW`: a card's redraw the store wrote with the decision) is turned
into its Web API call when it is sent, from the state then, so what is sent is the latest.
Real errors (`channel_not_found`, `not_in_channel`, ...) are not retried: the row is dropped and
counted; a write still rate limited past the pacer's deadline is dropped too, and its thread told
once.

The workspace-wide buckets (`chat.update`, Tier 3; `views.publish`) go to what a person waits
for first: while a bucket is short, a row waits for a call of it rather than queueing at the
pacer (first come, first served), a row after the answers (a queued notice's edit, a Home tab)
lets the cards' redraws waiting for it go first, and in a storm a card's redraw settles for its
call's result (`bot.slack.turns.Turns`). A keyed row superseded while it
waited is not sent at all (the store's `outbox_superseded`: its newer row draws the latest
state), so a card's redraw after its decision that waited until the call's result was written
is sent once, showing both. Rows that settle (due a few seconds
after they were put, `OutboxEntry.settle`) are looked for when due (`outbox_next_due`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from ..settings import checkpoint
from ..store import REDRAW_PRIORITY, OutboxEntry, OutboxRow, OutboxStats, OutboxWake
from .endings import ANSWER_ENDING, Ending, finish_answer
from .pacing import RateLimited, pacer_of
from .turns import RUNS_NEXT, PutBack, Turns

__all__ = [
    "ANSWER",
    "CARD",
    "HOME",
    "NOTICE",
    "OWED_SECONDS",
    "REACTION",
    "UPLOAD",
    "OutboxObserver",
    "OutboxStore",
    "Renderer",
    "SlackOutbox",
    "Write",
]

logger = logging.getLogger("opsgate.slack.outbox")

CARD = REDRAW_PRIORITY
"""Approval cards' redraws: a decided card must lose its buttons first."""
ANSWER = 1
NOTICE = 2
HOME = 3
REACTION = 3

UPLOAD = "files.upload_v2"
"""The outbox method of a file upload (slack_sdk's three-step `files_upload_v2`)."""

PUT_SECONDS = 2.0
"""How long storing a write may take before it is sent at once instead (a database that does
not answer must not keep a "not saved" notice from the person it is for)."""

HOLD_SECONDS = 1.0
"""Longest a row waits in flight for its Slack bucket (`Pacer.due_in`); a row that would wait
longer is put back until then, so that the sender's slots go to the rows whose bucket can take
them now (a post in another channel, a card's redraw), not to a queue behind one bucket."""

OWED_SECONDS = 10.0
"""How long messages put for a channel count as owed there (`owes`), unless sent sooner."""

_IN_FLIGHT = frozenset({ANSWER_ENDING, UPLOAD, "chat.update", "views.publish"})
"""Rows never put back for their budget (`_budget_wait`)."""

_GONE = {"message_not_found", "cant_update_message"}
_DONE_ANYWAY = {"already_reacted", "no_reaction", *_GONE}
"""Errors that mean the write has nothing left to do (it was applied, or cannot be)."""
_TRANSPORT = (aiohttp.ClientError, TimeoutError, SlackClientError)


@dataclass(frozen=True, slots=True)
class Write:
    """One Web API call to make for a row; `sent` runs once Slack applied it, with Slack's
    answer, before the row is done (a redraw records what the card now shows; a posted queue
    notice its ts, which the row's next drawing, on any replica, must find)."""

    method: str
    params: Mapping[str, Any]
    meta: Mapping[str, Any] = field(default_factory=dict)
    sent: Callable[[Mapping[str, Any]], Awaitable[None]] | None = None
    gone: Callable[[], Awaitable[None]] | None = None
    """Runs when Slack says the message is gone (`_GONE`: deleted by someone)."""


Renderer = Callable[[Mapping[str, Any], bool], Awaitable[Write | None]]
"""Turns an intent row's params into its call, when it is sent (None: nothing left to do).
The flag: the row was tried before (a kill, a lease that ran out, a transport error), so Slack
may have applied that try without the sender hearing of it."""


def _ordered(
    channel: str | None, key: str | None, priority: int, params: Mapping[str, Any]
) -> tuple[str, str] | None:
    """The thread when a row is one of its messages that a card or a streamed answer made
    after it must follow (a keyed row may be superseded, and so never sent: not these)."""
    if channel is None or key is not None or priority > NOTICE:
        return None
    return channel, str(params.get("thread_ts") or "")


class OutboxStore(Protocol):
    """The outbox operations of `bot.store.Store` this sender uses."""

    async def put_outbox(self, entries: Sequence[OutboxEntry]) -> list[str]: ...

    async def claim_outbox(
        self, claimer: str, *, limit: int, lease: timedelta
    ) -> list[OutboxRow]: ...

    async def hold_outbox(self, entry: OutboxEntry, claimer: str, lease: timedelta) -> str: ...

    async def outbox_sent(self, row_id: str) -> None: ...

    async def outbox_later(
        self, row_id: str, not_before: datetime, error: str, *, tried: bool = True
    ) -> None: ...

    async def outbox_stats(self) -> OutboxStats: ...

    async def release_outbox(self, claimer: str) -> int: ...

    async def renew_outbox(
        self, claimer: str, row_ids: Sequence[str], lease: timedelta
    ) -> None: ...

    async def outbox_superseded(self, row_id: str) -> bool: ...

    async def outbox_next_due(self) -> datetime | None: ...

    async def outbox_kept(self, row_ids: Sequence[str]) -> set[str]: ...


class OutboxObserver(Protocol):
    """Metrics for the outbox (`bot.observability.Metrics`)."""

    def slack_write_dropped(self, reason: str) -> None: ...

    def outbox_depth(self, depth: Mapping[int, int], oldest_seconds: float) -> None: ...

    def run_finished(self, outcome: Any) -> None: ...


@dataclass
class _Quiet:
    def slack_write_dropped(self, reason: str) -> None: ...

    def outbox_depth(self, depth: Mapping[int, int], oldest_seconds: float) -> None: ...

    def run_finished(self, outcome: Any) -> None: ...


class SlackOutbox:
    """Puts writes in the store and sends them; `run()` is the sender (an owned task). `wake`:
    rung by whoever else puts rows (the store, after a change that wrote a card's redraw);
    `renderers`: the intent rows' methods, and how each is drawn when it is sent."""

    def __init__(
        self,
        store: OutboxStore,
        client: AsyncWebClient,
        *,
        claimer: str,
        observer: OutboxObserver | None = None,
        lease: timedelta = timedelta(seconds=60),
        poll: float = 2.0,
        concurrency: int = 32,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        wake: OutboxWake | None = None,
        renderers: Mapping[str, Renderer] | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.claimer = claimer
        self.observer: OutboxObserver = observer or _Quiet()
        self.lease = lease
        self.poll = poll
        """Seconds between looks when nothing woke the sender (rows of other replicas)."""
        self.concurrency = concurrency
        self.clock = clock
        self.dropped: dict[str, int] = {}
        self._bell = wake if wake is not None else OutboxWake()
        """Rings when rows were put (here, or by the store in a change's transaction)."""
        self._inflight: dict[asyncio.Task[None], str] = {}
        """Sends in flight and their rows' ids (claims renewed while they last)."""
        self._held: set[str] = set()
        """Rows this process holds while it makes their write itself (answers' endings)."""
        self._renewed = clock()
        self._last_progress = clock()
        self._put_in: dict[tuple[str, str], int] = {}
        self._done_in: dict[tuple[str, str], int] = {}
        """Rows this process put and finished, per thread (what `settled` waits on)."""
        self._owed_in: dict[str, int] = {}
        """Of those, the rows put and not finished yet, per channel (`owes`)."""
        self._owed_at: dict[str, datetime] = {}
        """When the last of them was put, per channel."""
        self._done = asyncio.Condition()
        self._reported = clock()
        self._renderers: dict[str, Renderer] = dict(renderers or {})
        """The intents among the rows (e.g. `CARD_REDRAW`), and how each is drawn when sent."""
        self._turns = Turns(pacer_of(client))
        """Rows' turns at the workspace-wide buckets: cards' redraws first."""
        self._later = PutBack()
        """Rows put back until their bucket can take them (`HOLD_SECONDS`)."""

    def wake(self) -> None:
        """Rows were stored by someone else: look now rather than at the next poll (a row that
        settles is looked for when it is due: `outbox_next_due`). (The store rings the same
        `OutboxWake`, given to both, after a change that wrote a card's redraw.)"""
        self._bell()

    async def put(self, entries: Sequence[OutboxEntry]) -> None:
        """Store `entries` durably, then wake the sender. When the database refuses the write
        (read-only, full) or does not answer within `PUT_SECONDS` (an outage), they are sent at
        once instead, best effort as before: telling people that their click was not saved
        must not depend on saving."""
        try:
            async with asyncio.timeout(PUT_SECONDS):
                await self.store.put_outbox(entries)
        except Exception:
            logger.exception("could not store %d Slack writes; sending them now", len(entries))
            for entry in entries:
                try:
                    write = await self._write(entry.method, entry.params, entry.meta, retried=False)
                    if write:
                        await self._send(write.method, write.params, write.meta)
                except Exception as exc:  # Slack's refusal, or an intent not drawn (the store)
                    logger.error("%s to %s failed: %s", entry.method, entry.channel_id, exc)
                    self._drop("store")
            return
        for entry in entries:
            if thread := _ordered(entry.channel_id, entry.key, entry.priority, entry.params):
                self._put_in[thread] = self._put_in.get(thread, 0) + 1
                self._owed_in[thread[0]] = self._owed_in.get(thread[0], 0) + 1
                self._owed_at[thread[0]] = self.clock()
        self._bell()

    # -- answers' endings (`bot.slack.endings`): the `AnswerKeeper` of a streamed reply --------

    async def keep(self, ending: Ending) -> str | None:
        """Store an answer's ending, held by this process (renewed with the sends in flight);
        None when the store did not take it in `PUT_SECONDS` (the reply goes on best effort)."""
        late = {"channel": ending.channel, "thread_ts": ending.thread_ts, "text": _LATE}
        entry = OutboxEntry(
            ANSWER_ENDING,
            ending.params(),
            ANSWER,
            channel_id=ending.channel,
            key=f"answer:{ending.channel}:{secrets.token_hex(8)}",
            meta={"late": late},
        )
        try:
            async with asyncio.timeout(PUT_SECONDS):
                row_id = await self.store.hold_outbox(entry, self.claimer, self.lease)
        except Exception:
            logger.exception("could not keep the end of an answer in %s", ending.channel)
            return None
        self._held.add(row_id)
        return row_id

    async def kept(self, row_id: str) -> None:
        """The reply showed its ending itself: the row is done."""
        self._held.discard(row_id)
        try:
            await self.store.outbox_sent(row_id)
        except Exception:  # the row is sent again later: a redraw, harmless
            logger.exception("could not finish outbox row %s", row_id)

    async def release(self, row_id: str) -> None:
        """The reply could not show its ending: the sender shows it from the row, now."""
        self._held.discard(row_id)
        try:
            await self.store.outbox_later(row_id, self.clock(), "the reply could not finish")
        except Exception:  # still held: sent once the lease lapses (or at the next start)
            logger.exception("could not release outbox row %s", row_id)
        self._bell.idle.clear()
        self._bell.woken.set()

    async def settled(self, channel: str, thread_ts: str, timeout: float = 10.0) -> None:
        """Wait (up to `timeout`) until as many messages of the thread are done as this process
        had put in it, so that a card or a streamed answer made directly comes after the
        notices said before it."""
        thread = (channel, thread_ts)
        owed = self._put_in.get(thread, 0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout), self._done:
                await self._done.wait_for(lambda: self._done_in.get(thread, 0) >= owed)

    def owes(self, channel: str, thread_ts: str) -> bool:
        """Messages this process put for other threads of `channel` in the last `OWED_SECONDS`
        are not sent yet (the channel's posts are spoken for: a storm there). Older ones are
        not counted: another replica may have sent them."""
        put = self._owed_at.get(channel)
        if put is None or (self.clock() - put).total_seconds() > OWED_SECONDS:
            return False
        thread = (channel, thread_ts)
        own = self._put_in.get(thread, 0) - self._done_in.get(thread, 0)
        return self._owed_in.get(channel, 0) > own

    @property
    def idle(self) -> bool:
        """Nothing is owed that this sender knows of."""
        return self._bell.idle.is_set()

    async def wait_idle(self) -> None:
        """Until nothing is owed (tests; a graceful stop)."""
        await self._bell.idle.wait()

    def stuck_for(self) -> float:
        """Seconds since the sender last made progress while rows wait (0 when idle)."""
        if self._bell.idle.is_set():
            return 0.0
        return (self.clock() - self._last_progress).total_seconds()

    async def run(self) -> None:
        """Claim and send until cancelled; in-flight sends are cancelled with it (their rows
        stay claimed until the lease lapses, then are sent again: Slack applies a redraw or a
        Home tab twice harmlessly; a post of a notice may repeat, never vanish)."""
        try:
            await self.store.release_outbox(self.claimer)
        except Exception:
            logger.exception("could not release the outbox rows of an earlier start")
        try:
            while True:
                self._bell.woken.clear()
                puts = self._bell.rings
                room = self.concurrency - len(self._inflight)
                rows = await self._claim(room) if room > 0 else []
                for row in rows:
                    task = asyncio.create_task(self._deliver(row), name=f"outbox {row.id}")
                    self._inflight[task] = row.id
                    task.add_done_callback(self._finished)
                await self._renew()
                idle = not rows and not self._inflight and not await self._owed()
                if idle or (self.clock() - self._reported).total_seconds() >= 1.0:
                    await self._report()
                wait = self.poll
                if idle and (settling := await self._settling()) is not None:
                    idle, wait = False, min(wait, settling)
                if idle and puts == self._bell.rings:
                    self._bell.idle.set()
                # `asyncio.timeout`, not `wait_for`: on 3.11 a cancel that arrives as the wait
                # ends can be swallowed by `wait_for`, and the sender would never stop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._later.next_look(self.clock(), wait)):
                        await self._bell.woken.wait()
        finally:
            for task in self._inflight:
                task.cancel()
            await asyncio.gather(*self._inflight, return_exceptions=True)

    async def _renew(self) -> None:
        """Every third of a lease, hold the rows still in flight for another lease."""
        now = self.clock()
        if not (self._inflight or self._held) or now - self._renewed < self.lease / 3:
            return
        self._renewed = now
        held = [*self._inflight.values(), *self._held]
        try:
            await self.store.renew_outbox(self.claimer, held, self.lease)
        except Exception:
            logger.exception("could not renew the outbox claims")

    async def _owed(self) -> bool:
        """Rows this sender put back are owed until sent, unless they left the outbox since
        (cancelled, superseded, sent by another replica)."""
        grace = timedelta(seconds=self.poll)
        return await self._later.owed(self.clock(), grace, self.store.outbox_kept)

    async def _settling(self) -> float | None:
        """Seconds until the next row nobody holds is due, when one is waiting (None: none)."""
        try:
            due = await self.store.outbox_next_due()
        except Exception:
            logger.exception("could not read when the next outbox row is due")
            return None
        if due is None:
            return None
        return max(0.01, (due - self.clock()).total_seconds())

    async def _claim(self, room: int) -> list[OutboxRow]:
        try:
            return await self.store.claim_outbox(self.claimer, limit=room, lease=self.lease)
        except Exception:
            logger.exception("could not claim outbox rows")
            return []

    async def _report(self) -> None:
        self._reported = self.clock()
        try:
            stats = await self.store.outbox_stats()
            now = self.clock()
            oldest = 0.0 if stats.oldest is None else (now - stats.oldest).total_seconds()
            self.observer.outbox_depth(stats.depth, oldest)
        except Exception:
            logger.exception("could not read the outbox depth")

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.pop(task, None)
        self._last_progress = self.clock()
        self._bell.woken.set()
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error("an outbox send failed", exc_info=exc)

    async def _deliver(self, row: OutboxRow) -> None:
        try:
            await self._deliver_once(row)
        finally:
            thread = _ordered(row.channel_id, row.key, row.priority, row.params)
            if thread is not None and row.id not in self._later:  # not put back: done
                self._done_in[thread] = self._done_in.get(thread, 0) + 1
                if (left := self._owed_in.pop(thread[0], 0) - 1) > 0:
                    self._owed_in[thread[0]] = left
                async with self._done:
                    self._done.notify_all()

    async def _write(
        self, method: str, params: Mapping[str, Any], meta: Mapping[str, Any], *, retried: bool
    ) -> Write | None:
        """The call a row stands for: itself, or what its intent's renderer draws now."""
        renderer = self._renderers.get(method)
        if renderer is None:
            return Write(method, params, meta)
        await checkpoint("redraw_claimed")  # crash tests: the redraw owed, not yet sent
        return await renderer(params, retried)

    async def _superseded(self, row: OutboxRow) -> bool:
        """A keyed row (a card's redraw, a notice, a Home tab; not an answer's) that a newer
        row of its key replaced: not sent."""
        if row.key is None or ANSWER <= row.priority < NOTICE:
            return False
        try:
            return await self.store.outbox_superseded(row.id)
        except Exception:  # sent then: a redraw of the latest state, harmless
            logger.exception("could not tell whether %s was superseded", row.key)
            return False

    # -- the budget: rows wait out of flight for their bucket -----------------------------------

    def _budget_wait(self, row: OutboxRow, write: Write) -> float:
        """Seconds `write` would wait for its bucket, when the row may be put back for them
        (written as it is: not an intent, nor an answer's ending or a file's several steps;
        nor an edit or a Home tab, which wait their turn in flight behind cards: `_turn`)."""
        pacer = pacer_of(self.client)
        if pacer is None or row.method in self._renderers or row.method in _IN_FLIGHT:
            return 0.0
        channel = write.params.get("channel")
        return pacer.due_in(write.method, str(channel) if channel else None)

    async def _put_back(self, row: OutboxRow, wait: float) -> None:
        self._later.add(row.id, due := self.clock() + timedelta(seconds=wait))
        await self.store.outbox_later(row.id, due, "waiting for its Slack budget", tried=False)

    async def _deliver_once(self, row: OutboxRow) -> None:
        self._later.discard(row.id)
        if await self._superseded(row):
            return
        try:
            write = await self._write(row.method, row.params, row.meta, retried=row.attempts > 1)
        except Exception as exc:  # the state could not be read (the database): try later
            later = self.clock() + timedelta(seconds=min(60, 2**row.attempts))
            logger.exception("could not draw %s for %s; trying again", row.method, row.key)
            await self.store.outbox_later(row.id, later, f"{type(exc).__name__}: {exc}")
            return
        if write is None:  # nothing left to draw (the call or its card is gone)
            await self.store.outbox_sent(row.id)
            return
        if (wait := self._budget_wait(row, write)) > HOLD_SECONDS:
            await self._put_back(row, wait)
            return
        if await self._turn(row, write):  # else superseded: its newer row draws it
            await self._deliver_write(row, write)

    async def _turn(self, row: OutboxRow, write: Write) -> bool:
        """The row's turn at its workspace-wide bucket (`bot.slack.turns.Turns`): answers, and a
        channel's own post bucket, wait for nobody."""
        if write.method == "chat.postMessage" or ANSWER <= row.priority < NOTICE:
            return True
        return await self._turns.wait(
            write.method,
            card=row.priority < ANSWER,
            key=row.key,
            superseded=lambda: self._superseded(row),
            runs_next=bool(write.meta.get(RUNS_NEXT)),
        )

    async def _deliver_write(self, row: OutboxRow, write: Write) -> None:
        try:
            answer = await self._send(write.method, write.params, write.meta)
            if write.sent is not None:
                try:
                    await write.sent(answer)
                except Exception:
                    logger.exception("could not record that %s was sent", row.key)
        except RateLimited:
            logger.error("%s for %s rate limited past the deadline", row.method, row.channel_id)
            self._drop("ratelimited", row)
            await self._tell_late(row)
        except SlackApiError as exc:
            error = str(exc.response.get("error"))
            if error not in _DONE_ANYWAY:
                logger.error("%s to %s failed: %s", row.method, row.channel_id, error)
                self._drop("slack_error", row)
            elif error in _GONE and write.gone is not None:
                try:
                    await write.gone()
                except Exception:
                    logger.exception("could not record that %s is gone", row.key)
        except _TRANSPORT as exc:
            later = self.clock() + timedelta(seconds=min(60, 2**row.attempts))
            logger.warning("%s to %s failed (%s); trying again", row.method, row.channel_id, exc)
            await self.store.outbox_later(row.id, later, f"{type(exc).__name__}: {exc}")
            return
        await self.store.outbox_sent(row.id)

    async def _send(
        self, method: str, params: Mapping[str, Any], meta: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        """Make the call; Slack's answer (empty for the calls of several steps)."""
        if method == UPLOAD:
            await self.client.files_upload_v2(**params)
            return {}
        if method == ANSWER_ENDING:  # kept by a reply that may have shown it before it died
            await finish_answer(self.client, params, retried=True)
            return {}
        try:
            response = await self.client.api_call(method, json=dict(params))
        except SlackApiError as exc:
            fallback = meta.get("fallback")
            if exc.response.get("error") != "invalid_blocks" or not isinstance(fallback, dict):
                raise
            # A card posted minimal (Slack refused its blocks) is redrawn minimal.
            response = await self.client.api_call(method, json=fallback)
        return response.data if isinstance(response.data, dict) else {}

    async def _tell_late(self, row: OutboxRow) -> None:
        """Tell the thread once that a write could not be made (`meta["late"]`: the words)."""
        late = row.meta.get("late")
        if isinstance(late, dict):
            try:
                await self.client.api_call("chat.postMessage", json=late)
            except (SlackApiError, *_TRANSPORT):
                logger.error("could not tell %s about a lost write", row.channel_id)

    def _drop(self, reason: str, row: OutboxRow | None = None) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        self.observer.slack_write_dropped(reason)
        if row is not None and row.method == ANSWER_ENDING:
            # The run ended (counted) when its ending was stored; Slack never showed it.
            self.observer.run_finished("answer_lost")


_LATE = "_The end of this answer could not be shown: Slack kept asking me to slow down._"
