"""The inbox: what Slack delivered is saved before its 200, then processed from the saved row.

`docs/architecture.md`, "acknowledged means durable": the front end saves the delivery with
`save_message` / `save_slash` / `save_request` (deduplicated in the same transaction; one row
per delivery: a message is saved once, as its `message` row, by the one intake) and only then
lets the acknowledgement go out. Processing runs as owned background work (`bot.tasks`), so a
graceful stop waits for it; a row whose processing never finished (kill -9, a stop past its
grace period) is claimed and processed by the next start-up's `recover`.

Processing a row queues its run (or answers it) and then marks the row done. A crash between
the two processes the row again at start-up: the run is not queued twice (the session is busy
with the first one, and the thread is told so).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..settings import checkpoint
from ..store import InboxItem, StoreError
from .context import RunContext
from .notices import Notice
from .output import Thread

__all__ = ["Inbox", "MessageDelivery", "Replay", "RequestDelivery", "SlashDelivery"]

logger = logging.getLogger("opsgate.inbox")

_FROZEN = ConfigDict(frozen=True, extra="ignore")


class MessageDelivery(BaseModel):
    """A message to the bot: a mention, a DM, a reply in one of its threads."""

    model_config = _FROZEN

    team: str
    channel: str
    thread_ts: str
    user: str
    text: str
    ts: str
    author_team: str | None = None
    """The author's workspace, for the same authorisation as a button (cancel by message)."""

    @property
    def thread(self) -> Thread:
        return Thread(self.team, self.channel, self.thread_ts)


class SlashDelivery(BaseModel):
    """`/opsgate <request>`."""

    model_config = _FROZEN

    team: str
    channel: str
    user: str
    text: str


class RequestDelivery(BaseModel):
    """Any request Slack sent (an event, a click, a form, a shortcut, a command, an options
    lookup), as the front end received it: saved by the one intake before its 200 and, if the
    process died before the request was handled, handed back to the front end (`ctx.replay`) at
    the next start-up. Slack-free here: `body` is opaque to the run service."""

    model_config = _FROZEN

    kind: str
    body: dict[str, Any]


Replay = Callable[[RequestDelivery], Awaitable[None]]
OnMessage = Callable[..., Awaitable[None]]
OnSlash = Callable[..., Awaitable[Notice | None]]


class Inbox:
    """Saves deliveries and processes them through the run service's intake."""

    def __init__(self, ctx: RunContext, *, on_message: OnMessage, on_slash: OnSlash) -> None:
        self.ctx = ctx
        self._on_message = on_message
        self._on_slash = on_slash

    async def save_message(
        self, delivery: MessageDelivery, *, keys: Sequence[str]
    ) -> InboxItem | None:
        """Save before the 200; None for a delivery seen before (under any of `keys`). A
        `StoreError` (the database refuses writes) is recorded for the health check and raised:
        the caller must not acknowledge, and should tell the author."""
        return await self._save("message", delivery, keys)

    async def save_slash(
        self, delivery: SlashDelivery, *, keys: Sequence[str] = ()
    ) -> InboxItem | None:
        """Save before the 200; None for an invocation seen before (under any of `keys`)."""
        return await self._save("slash", delivery, keys)

    async def save_request(
        self, delivery: RequestDelivery, *, keys: Sequence[str] = ()
    ) -> InboxItem | None:
        """Save before the 200; None for a request seen before (under any of `keys`)."""
        return await self._save("request", delivery, keys)

    async def save(
        self, delivery: MessageDelivery | SlashDelivery | RequestDelivery, keys: Sequence[str]
    ) -> InboxItem | None:
        """Save any delivery as its kind of row; None for one seen before."""
        if isinstance(delivery, MessageDelivery):
            return await self.save_message(delivery, keys=keys)
        if isinstance(delivery, SlashDelivery):
            return await self.save_slash(delivery, keys=keys)
        return await self.save_request(delivery, keys=keys)

    async def save_within(
        self,
        save: Callable[[], Coroutine[Any, Any, InboxItem | None]],
        seconds: float,
        *,
        what: str,
    ) -> InboxItem | None:
        """The row `save` saves, or `TimeoutError` after `seconds`; a failure (`StoreError`, or
        the timeout) is recorded for the health check as saving `what`, and raised.

        A save that does not answer (a PostgreSQL outage) is not waited for, and not cancelled
        either: a cancelled asyncpg query may hang too, and a save cancelled at its commit may
        have committed (SQLite's worker thread commits whoever stopped waiting), which its
        caller would then never hear of. It goes on as owned work (cancelled at shutdown);
        should it commit after all, a `request` or `slash` row is marked done at once, so the
        request the person was told is not saved is never handled later. A message's row is
        processed instead: the front end passed its event on unsaved, and the message's own
        save finds it seen before (its keys are the row's), and nobody was told it was not
        saved."""
        try:
            return await self._within(save, seconds)
        except (StoreError, TimeoutError) as exc:
            failure = exc if isinstance(exc, StoreError) else StoreError("the database is slow")
            self.ctx.health.failed(f"saving a {what}", failure)
            raise

    async def _within(
        self, save: Callable[[], Coroutine[Any, Any, InboxItem | None]], seconds: float
    ) -> InboxItem | None:
        try:
            task = self.ctx.tasks.spawn(save(), name="saving a request")
        except RuntimeError:  # stopping: no owner for it, so wait as long as it takes
            return await save()
        done, _ = await asyncio.wait({task}, timeout=seconds)
        if task in done:
            saved: InboxItem | None = task.result()
            return saved

        async def forget() -> None:
            with contextlib.suppress(Exception):
                late = await task
                if late is not None and late.kind == "message":
                    self.process_soon(late)
                elif late is not None:
                    await self.done(late.id)

        with contextlib.suppress(RuntimeError):
            self.ctx.tasks.spawn(forget(), name="forgetting a late request")
        raise TimeoutError(f"the request was not saved in {seconds} s")

    async def done(self, item_id: int) -> None:
        """The request's handler finished: the row is not handed back at the next start."""
        await self.ctx.store.inbox_done(item_id)

    async def _save(self, kind: Any, delivery: BaseModel, keys: Sequence[str]) -> InboxItem | None:
        payload = delivery.model_dump()
        try:
            item_id = await self.ctx.store.inbox_add(kind, payload, keys=keys)
        except StoreError as exc:
            self.ctx.health.failed(f"saving a {kind}", exc)
            raise
        self.ctx.health.succeeded()
        if item_id is None:
            return None
        return InboxItem(id=item_id, kind=kind, payload=payload, received_at=self.ctx.clock())

    def process_soon(self, item: InboxItem) -> None:
        """Process the row as owned background work (a graceful stop waits for it)."""
        self.ctx.tasks.spawn(self.process(item), name=f"inbox {item.id}")

    async def process_owned(self, item: InboxItem) -> Notice | None:
        """`process` as owned work, awaited (a slash command's answer is needed). When the bot
        is stopping, the row stays saved for the next start-up."""
        try:
            task = self.ctx.tasks.spawn(self.process(item), name=f"inbox {item.id}")
        except RuntimeError:
            return None
        result: Notice | None = await task
        return result

    async def process(self, item: InboxItem) -> Notice | None:
        """Act on the row, then mark it done; a slash command's private answer is returned."""
        await checkpoint("inbox")
        notice: Notice | None = None
        match item.kind:
            case "message":
                message = MessageDelivery.model_validate(item.payload)
                await self._on_message(
                    message.thread,
                    user=message.user,
                    text=message.text,
                    message_ts=message.ts,
                    team=message.author_team,
                )
            case "slash":
                slash = SlashDelivery.model_validate(item.payload)
                notice = await self._on_slash(
                    team=slash.team, channel=slash.channel, user=slash.user, text=slash.text
                )
            case "request":
                # Marked done first: a request that fails again at every start must not be
                # handed back for ever (its effects are conditional writes: at most once).
                await self.ctx.store.inbox_done(item.id)
                if self.ctx.replay is not None:
                    await self.ctx.replay(RequestDelivery.model_validate(item.payload))
                return None
        await self.ctx.store.inbox_done(item.id)
        return notice

    async def recover(self) -> int:
        """At start-up: process what a previous process saved but never finished."""
        items = await self.ctx.store.inbox_recover()
        for item in items:
            try:
                notice = await self.process(item)
            except Exception:
                logger.exception("could not process saved delivery %d", item.id)
                continue
            if notice is not None:
                logger.info("saved /opsgate request %d was answered: %s", item.id, notice.kind)
        if items:
            logger.info("processed %d delivery(ies) saved before the restart", len(items))
        return len(items)
