"""The Bolt app: its Web API client, the app itself, the one durable intake every request passes
before any listener (its global middleware, `install`), and the tasks listeners run in.

Built in this order by `bot.wiring.slack_bot`, so that nothing points back: `slack_client` →
the outbox and `SlackThreadOutput` on it → `bolt_app(...)` (Bolt's own handlers for a
listener's start and end: `ListenerTasks` and the intake's `MarkDone`) → the run service
(`bot.wiring.run_service`, given the output, `group_members(client)` and the app's replay) →
`bot.slack.listeners.register(...)`, the intake and the listeners that call that service.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, cast

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.listener.async_listener_completion_handler import (
    AsyncListenerCompletionHandler,
)
from slack_bolt.listener.async_listener_start_handler import AsyncListenerStartHandler
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from ..approvals import FetchMembers
from ..pagerduty import LookupEmail
from ..runs.inbox import MessageDelivery, Replay, RequestDelivery, SlashDelivery
from ..runs.notices import NotSaved
from ..runs.output import Thread
from ..runs.service import RunService
from ..settings import Settings
from ..store import InboxItem, StoreError
from .ids import ledger_id_of, team_of, thread_of
from .notices import render
from .output import SlackThreadOutput
from .pacing import Pacer

__all__ = [
    "SAVED_ROW",
    "SAVE_SECONDS",
    "CountingWebClient",
    "ListenerTasks",
    "MarkDone",
    "RowOf",
    "Saving",
    "bolt_app",
    "channel_members",
    "group_members",
    "install",
    "replayer",
    "request_key",
    "request_kind",
    "slack_client",
    "user_by_email",
]

logger = logging.getLogger("opsgate.slack")


def slack_client(
    settings: Settings,
    session: aiohttp.ClientSession | None,
    *,
    on_error: Callable[[str], None] | None = None,
    pacer: Pacer | None = None,
) -> AsyncWebClient:
    """The Web API client: talks to `SLACK_API_URL` over `session`, paced at Slack's tiers and
    waiting out rate limits (`bot.slack.pacing`: a 429 is never a dropped write);
    `on_error(method)` hears of every call that failed (metrics)."""
    return CountingWebClient(
        on_error=on_error or (lambda method: None),
        pacer=pacer or Pacer(),
        token=settings.slack_bot_token.get_secret_value(),
        base_url=settings.slack_api_url,
        retry_handlers=[AsyncConnectionErrorRetryHandler(max_retry_count=2)],
        logger=logging.getLogger("opsgate.slack"),
        session=session,
        timeout=int(max(1, settings.opsgate_slack_timeout)),
    )


def group_members(client: AsyncWebClient) -> FetchMembers:
    """How the approvals rules learn who is in a user group (`usergroups.users.list`)."""

    async def members(group_id: str) -> Iterable[str]:
        response = await client.usergroups_users_list(usergroup=group_id)
        users: list[Any] = response.get("users") or []
        return [str(user) for user in users]

    return members


def user_by_email(client: AsyncWebClient) -> LookupEmail:
    """How PagerDuty's on-call email becomes a Slack user (`users.lookupByEmail`, scope
    `users:read.email`): `bot.pagerduty`."""

    async def lookup(email: str) -> str | None:
        response = await client.users_lookupByEmail(email=email)
        user = response.get("user") or {}
        return str(user["id"]) if user.get("id") else None

    return lookup


def channel_members(client: AsyncWebClient) -> FetchMembers:
    """Who is in a channel (`conversations.members`, every page): the Home tab lists a call
    where anyone in its channel approves only to the channel's members."""

    async def members(channel_id: str) -> Iterable[str]:
        users: list[str] = []
        cursor = ""
        while True:
            response = await client.conversations_members(
                channel=channel_id, cursor=cursor or None, limit=1000
            )
            users.extend(str(user) for user in response.get("members") or [])
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return users

    return members


def bolt_app(
    settings: Settings,
    client: AsyncWebClient,
    *,
    done: Callable[[int], Awaitable[None]],
    tasks: ListenerTasks,
    authorize: Callable[..., Awaitable[AuthorizeResult | None]],
) -> AsyncApp:
    """The app on `client`'s URL and session, no listener yet. Each request is authorized by
    `authorize` (the sign-in's, `bot.slack.signin`), which gives it the bot token: the app's own
    client carries none, as Bolt wants of an app given `authorize`. A request's inbox row is
    marked done (`done`) when its listener ended, and every listener runs as a task `tasks`
    owns: both through Bolt's public listener runner (`AsyncApp.listener_runner`), whose start
    and completion handlers the app's constructor does not take."""
    secret = settings.slack_signing_secret
    tokenless = AsyncWebClient(
        base_url=client.base_url,
        session=client.session,
        timeout=client.timeout,
        logger=client.logger,
        retry_handlers=client.retry_handlers,
    )
    with _no_env_token():
        app = AsyncApp(
            client=tokenless,
            # Bolt takes None as "not authorized" (`AsyncCallableAuthorize`); its hint omits it.
            authorize=cast(Callable[..., Awaitable[AuthorizeResult]], authorize),
            signing_secret=secret.get_secret_value() if secret else "",
            logger=logging.getLogger("opsgate.bolt"),
        )
    runner = app.listener_runner
    runner.listener_start_handler = tasks.starting(runner.listener_start_handler)
    runner.listener_completion_handler = MarkDone(done, runner.listener_completion_handler)
    return app


@contextlib.contextmanager
def _no_env_token() -> Iterator[None]:
    """Bolt takes a missing `token` from `SLACK_BOT_TOKEN` and then, with a `client` given too,
    warns at every start that the token is unused. The client carries the token (from the
    settings); the app is built without the variable, which is put back at once. Building is
    synchronous: no other task runs in between."""
    saved = os.environ.pop(_TOKEN_VARIABLE, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[_TOKEN_VARIABLE] = saved


_TOKEN_VARIABLE = "SLACK_BOT_TOKEN"


# -- counting ------------------------------------------------------------------------------------
# A Web API client that reports every failed call by its method name (metrics), so that no
# caller has to remember to count its own errors.


class CountingWebClient(AsyncWebClient):
    """`AsyncWebClient` whose every call waits its turn at `pacer` (429s waited out, see
    `bot.slack.pacing`), calling `on_error(method)` when Slack answers `ok: false` or cannot be
    reached (after the retries), before the error propagates as usual."""

    def __init__(
        self, *, on_error: Callable[[str], None], pacer: Pacer | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._on_error = on_error
        self.pacer = pacer or Pacer()

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        send = functools.partial(super().api_call, api_method, **kwargs)
        try:
            return await self.pacer.call(api_method, _channel_of(kwargs), send)
        except (SlackApiError, aiohttp.ClientError, TimeoutError):
            self._on_error(api_method)
            raise


def _channel_of(kwargs: dict[str, Any]) -> str | None:
    """The `channel` argument of a Web API call, wherever slack_sdk put it."""
    for part in ("json", "data", "params"):
        value = kwargs.get(part)
        if isinstance(value, dict) and value.get("channel"):
            return str(value["channel"])
    return None


# -- listener tasks ------------------------------------------------------------------------------
# Bolt acknowledges an event (HTTP 200) and then runs its listener in a task of its own, which it
# keeps no list of. On shutdown those tasks must finish before the store closes, or an
# acknowledged mention would be dropped: Bolt's listener start handler runs first thing in that
# task, and hands it to `ListenerTasks`, which owns it from then on.


class ListenerTasks:
    """The tasks Bolt's listeners run in, from their start until they end."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def starting(self, then: AsyncListenerStartHandler) -> AsyncListenerStartHandler:
        """Bolt's listener start handler: records the listener's task, then `then` (Bolt's)."""
        return _Started(self._running, then)

    @property
    def running(self) -> int:
        return len(self._running)

    async def aclose(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for the listeners still running, then cancel the rest
        and wait for them; returns how many were running."""
        running = set(self._running)
        if running:
            _, late = await asyncio.wait(running, timeout=timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        return len(running)


class _Started(AsyncListenerStartHandler):
    def __init__(self, running: set[asyncio.Task[Any]], then: AsyncListenerStartHandler) -> None:
        self.running = running
        self.then = then

    async def handle(self, request: AsyncBoltRequest, response: BoltResponse | None) -> None:
        task = asyncio.current_task()
        if task is not None and task not in self.running:
            self.running.add(task)
            task.add_done_callback(self.running.discard)
        await self.then.handle(request=request, response=response)


# -- the one intake ----------------------------------------------------------------------------
# The one durable intake: every request Slack sends is saved, with its dedupe key, before any
# listener can acknowledge it: one row, one commit.
#
# Events, block actions, view submissions and closes, shortcuts, slash commands and options
# lookups all pass one global Bolt middleware (installed by `bot.slack.listeners.register`, after
# Bolt's signature check). A request that has a row of its own (`row_of`: a message the bot acts
# on, a mention, a DM, a reply in one of its threads; a `/opsgate <request>`) is saved as that
# row, the one the inbox processes it from, under the request's key and the row's own
# (`Inbox.save_message`, `Inbox.save_slash`); any other request as an inbox row of kind `request`
# (`Inbox.save_request`), in the transaction that claims its key. A key seen before (a replay
# within Slack's signature window, a retry, a second copy of a shortcut, a mention's `message`
# event after its `app_mention`) is answered 200 and handled no further. A `request` row is marked
# done when Bolt says its listener finished (`MarkDone`, its completion handler), a `message` or
# `slash` row by the inbox once processed; a `request` row left behind by a kill -9 after the 200
# is handed back to the app at the next start-up (`replay`), which runs it through the same
# listeners. A listener saves its row itself only for a request the intake did not (handed back,
# or not saved in time), under the row's own keys, so nothing is saved twice and a replayed
# request repeats nothing.
#
# A database that does not save the request in `SAVE_SECONDS` (refusing writes, or a
# PostgreSQL outage) leaves Slack's 3 s to answer: a click, a form or a shortcut is answered 200
# and the person is told privately that nothing was saved (try again); a slash command is
# answered with the same words; an event goes on to its listener unsaved (a message's listener
# then tries its own save; failing the same way, it tells the author and the 500 makes Slack
# deliver it again); an options lookup gets no options. See docs/architecture.md, "One intake".


intake_logger = logging.getLogger("opsgate.slack.intake")

SAVE_SECONDS = 2.0
"""Longest wait for the request's row: Slack wants its answer within 3 s."""

_ROW = "opsgate_request_row"
"""The context key holding the request's inbox row id (marked done when its listener ends)."""
_REPLAYED = "opsgate_replayed"
"""Set on a request handed back at start-up: its row exists (and is done) already."""

SAVED_ROW = "opsgate_saved_row"
"""The context key of a request's own inbox row, a message's or a `/opsgate` request's (saved
by the intake, processed by the inbox once its listener hands it over)."""

Next = Callable[[], Awaitable[None]]
Saving = tuple[MessageDelivery | SlashDelivery, Sequence[str]]
"""A request with a row of its own, as the inbox saves it: the delivery and its own keys."""
RowOf = Callable[[Mapping[str, Any], AsyncBoltContext], Awaitable[Saving | None]]
"""Whether a request has a row of its own, and how it is saved (its listener's)."""


def request_kind(body: Mapping[str, Any]) -> str:
    """What Slack sent: `command`, `event_callback`, `block_actions`, `view_submission`,
    `view_closed`, `shortcut`, `message_action`, `block_suggestion`, …"""
    if "command" in body and "type" not in body:
        return "command"
    return str(body.get("type") or "unknown")


def request_key(body: Mapping[str, Any]) -> str | None:
    """What names one request of any kind, for dedupe; None for a lookup with no identity
    (options), which is saved but never deduplicated."""
    kind = request_kind(body)
    team = team_of(body)
    match kind:
        case "event_callback":
            name = body.get("event_id")
        case "command":
            name = body.get("trigger_id") or body.get("response_url")
        case "block_actions":
            actions = body.get("actions") or [{}]
            first = actions[0] if isinstance(actions[0], Mapping) else {}
            name = _joined(body.get("trigger_id"), first.get("action_ts"))
        case "view_submission" | "view_closed":
            view = body.get("view") or {}
            name = _digest(
                body.get("trigger_id"),
                view.get("id"),
                view.get("hash"),
                view.get("private_metadata"),
                (body.get("user") or {}).get("id"),
                view.get("state"),
            )
        case "shortcut" | "message_action":
            name = _joined(body.get("trigger_id"), body.get("action_ts"))
        case _:
            name = None
    return f"request:{kind}:{team}:{name}" if name else None


def install(
    app: AsyncApp, service: RunService, output: SlackThreadOutput, *, row_of: RowOf
) -> None:
    """The intake middleware (the app was built with `MarkDone` as its completion handler,
    and the service with `replayer(app)`). `row_of` says which requests have rows of their
    own: those are saved as those rows, the ones the inbox processes them from."""

    async def intake(req: AsyncBoltRequest, resp: BoltResponse, next: Next) -> BoltResponse:
        if req.context.get(_REPLAYED):
            await next()
            return resp
        body: dict[str, Any] = req.body
        kind = request_kind(body)
        key = request_key(body)
        try:
            saved = await service.save_within(
                lambda: _save(service, row_of, req, kind, key), SAVE_SECONDS, what=_what(kind)
            )
        except (StoreError, TimeoutError) as exc:
            intake_logger.error("a %s request was not saved: %s", kind, exc or "timed out")
            if kind == "event_callback":
                await next()  # a message's listener saves it, or reports (see the docstring)
                return resp
            return await _not_saved(service, output, kind, body)
        if saved is None:
            intake_logger.info("a %s request seen before (%s) was not handled again", kind, key)
            return BoltResponse(status=200, body="")
        if saved.kind == "request":
            req.context[_ROW] = saved.id
        else:  # its listener hands it to the inbox, which marks it done
            req.context[SAVED_ROW] = saved
        await next()
        return resp

    app.use(intake)


def replayer(app: AsyncApp) -> Replay:
    """How a request saved by an earlier process is handled again: through `app`, as Slack
    would deliver it, past the intake (its row exists, and is done, already)."""

    async def replay(delivery: RequestDelivery) -> None:
        request = AsyncBoltRequest(
            body=delivery.body, mode="socket_mode", context={_REPLAYED: True}
        )
        response = await app.async_dispatch(request)
        intake_logger.info(
            "a %s request saved before the restart: %d", delivery.kind, response.status
        )

    return replay


async def _save(
    service: RunService, row_of: RowOf, req: AsyncBoltRequest, kind: str, key: str | None
) -> InboxItem | None:
    """One row, one commit: a request with a row of its own as that row (under the request's
    key and the row's), any other request as a `request` row; None for one seen before. Not
    waited for past `SAVE_SECONDS` (`Inbox.save_within` says what becomes of it)."""
    keys = [key] if key else []
    saving = await row_of(req.body, req.context)
    if saving is not None:
        delivery, own = saving
        return await service.save(delivery, [*keys, *own])
    return await service.save(RequestDelivery(kind=kind, body=req.body), keys)


class MarkDone(AsyncListenerCompletionHandler):
    """Bolt's listener completion handler: marks the request's row done when its listener
    ended (acknowledged and finished), then hands over to `then` (Bolt's own)."""

    def __init__(
        self, done: Callable[[int], Awaitable[None]], then: AsyncListenerCompletionHandler
    ) -> None:
        self.done = done
        self.then = then

    async def handle(self, request: AsyncBoltRequest, response: BoltResponse | None) -> None:
        row = request.context.get(_ROW)
        if isinstance(row, int):
            try:
                await self.done(row)
            except StoreError as exc:  # handed back at the next start: its writes are once-only
                intake_logger.warning("could not mark request %d done: %s", row, exc)
        await self.then.handle(request=request, response=response)


async def _not_saved(
    service: RunService, output: SlackThreadOutput, kind: str, body: Mapping[str, Any]
) -> BoltResponse:
    """Answer within Slack's 3 s; tell the person nothing was saved."""
    notice = NotSaved(_what(kind))
    if kind == "command":
        text = render(notice).text
        return BoltResponse(
            status=200,
            body=json.dumps({"text": text}),
            headers={"content-type": ["application/json;charset=utf-8"]},
        )
    if kind == "block_suggestion":
        return BoltResponse(status=200, body=json.dumps({"options": []}))
    user = str((body.get("user") or {}).get("id") or "")
    thread = await _thread_of(service, body)
    if thread is not None and user:
        # Not through the outbox: the database that did not take the request is where it lives.
        await output.replies.tell_mrkdwn(thread, user, render(notice).text, direct=True)
    return BoltResponse(status=200, body="")


async def _thread_of(service: RunService, body: Mapping[str, Any]) -> Thread | None:
    """Where to tell the person: the clicked message's thread, else the call's card's."""
    if (thread := thread_of(body)) is not None or (ledger_id := ledger_id_of(body)) is None:
        return thread
    try:
        return await service.thread_of_call(ledger_id)
    except StoreError:
        return None  # reading fails too: nowhere to answer


def _what(kind: str) -> Literal["click", "message"]:
    """The person's word for the request: a click (buttons, forms) or a message."""
    return "click" if kind.startswith(("block_", "view_")) else "message"


def _joined(*parts: Any) -> str | None:
    return ":".join(str(p) for p in parts if p) or None


def _digest(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
