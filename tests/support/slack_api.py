"""A real HTTP server on 127.0.0.1 that stands in for Slack's Web API in tests.

Point slack_sdk / Bolt at it with `AsyncWebClient(token=..., base_url=standin.url)`. It accepts
every method at `POST /api/{method}` (form, JSON or multipart bodies, and query parameters, which
slack_sdk's async client uses for `params=`), records each call, answers the way Slack does
(including `{"ok": false}` errors and 429 with `Retry-After` when told to), and keeps just enough
state (messages, streams, reactions, uploads) to answer follow-up calls like Slack would.

With `rate_limits=RateLimits()` (tests/support/slack_ratelimits.py) it also enforces Slack's
published rate limits, per app (token) and method, and per channel for `chat.postMessage`: a
call over the limit answers 429 with `Retry-After` and is not applied. Off by default.

Tests wait for calls with `await standin.wait_for(method)`; nothing here sleeps.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from tests.support.loopback import serve_on_loopback
from tests.support.slack_ratelimits import RateLimits

__all__ = ["SlackAPIStandIn", "SlackCall", "UploadedFile"]

_JSON_FIELDS = ("blocks", "attachments", "view", "files", "metadata", "chunks")
_STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")
_MAX_BLOCKS = 50
_MAX_SECTION_TEXT = 3000
_MAX_HEADER_TEXT = 150
_MAX_BUTTON_VALUE = 2000
_MAX_MESSAGE_TEXT = 40000
_MAX_TASK_FIELD = 256
"""Slack's longest task_update title, details or output."""
_TASK_STATUSES = ("pending", "in_progress", "complete", "error")
_MAX_SUGGESTED_PROMPTS = 4

Answer = Mapping[str, Any] | Callable[["SlackCall"], Mapping[str, Any]]


@dataclass(frozen=True)
class SlackCall:
    """One request the stand-in received, and what it answered."""

    method: str
    params: dict[str, Any]
    """Query, form/JSON/multipart fields merged; `blocks` etc. JSON-decoded; `token` removed."""
    headers: dict[str, str]
    """Request headers without `Authorization` (see `token`)."""
    token: str | None
    """The bearer token (or `token` parameter) the call carried, None when it had none."""
    status: int = 200
    response: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == 200 and bool(self.response.get("ok"))


@dataclass(frozen=True)
class UploadedFile:
    """A file uploaded through files.getUploadURLExternal → upload → completeUploadExternal."""

    file_id: str
    filename: str
    title: str | None
    content: bytes
    channel_id: str | None
    thread_ts: str | None
    initial_comment: str | None

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


@dataclass
class _Failure:
    error: str
    status: int
    retry_after: int | None
    where: Callable[[dict[str, Any]], bool] | None = None


@dataclass
class _Stream:
    channel: str
    ts: str
    active: bool = True


class _SlackError(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class SlackAPIStandIn:
    """Slack's Web API on a loopback port; use as `async with SlackAPIStandIn() as slack:`."""

    def __init__(
        self,
        *,
        token: str | None = None,
        team_id: str = "T0TEST",
        team: str = "OpsGate Test",
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        rate_limits: RateLimits | None = None,
    ) -> None:
        """`token`: when set, calls with another token answer `invalid_auth`. `rate_limits`:
        when set, Slack's rate limits are enforced (429s are counted in `rate_limits.refused`)."""
        self.rate_limits = rate_limits
        self.team_id = team_id
        self.team = team
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.calls: list[SlackCall] = []
        self._token = token
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._base = ""
        self._numbers = itertools.count(100)
        self._last_ts = 0
        """Microseconds of the last ts given (each one later than the one before)."""
        self._failures: dict[str, deque[_Failure]] = defaultdict(deque)
        self._answers: dict[str, Answer] = {}
        self._streaming = True
        self._streaming_refusal = "unknown_method"
        self._messages: dict[tuple[str, str], dict[str, Any]] = {}
        self._deleted: set[tuple[str, str]] = set()
        """Messages deleted (`chat.delete`): `chat.update` of one is `message_not_found`."""
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._reactions: set[tuple[str, str, str]] = set()
        self._users: dict[str, dict[str, Any]] = {}
        self._usergroups: dict[str, list[str]] = {}
        self._members: dict[str, list[str]] = {}
        self.statuses: dict[tuple[str, str], str] = {}
        """The assistant status of each thread (channel, thread_ts), as last set ("" cleared)."""
        self.titles: dict[tuple[str, str], str] = {}
        self.suggested_prompts: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._channels: dict[str, dict[str, Any]] = {}
        self._pending_uploads: dict[str, dict[str, Any]] = {}
        self._upload_content: dict[str, bytes] = {}
        self.uploaded_files: list[UploadedFile] = []
        self._held: dict[str, asyncio.Event] = {}
        self._hung: dict[str, deque[Callable[[dict[str, Any]], bool] | None]] = defaultdict(deque)
        self.holding: dict[str, int] = {}
        """How many calls each held method got (see `hold`)."""
        self._closing = asyncio.Event()
        self._handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "chat.delete": self._delete,
            "chat.getPermalink": self._permalink,
            "chat.startStream": self._start_stream,
            "chat.appendStream": self._append_stream,
            "chat.stopStream": self._stop_stream,
            "assistant.threads.setStatus": self._set_status,
            "assistant.threads.setTitle": self._set_title,
            "assistant.threads.setSuggestedPrompts": self._set_prompts,
            "reactions.add": self._reaction_add,
            "reactions.remove": self._reaction_remove,
            "views.open": self._views_open,
            "views.update": self._views_update,
            "views.publish": self._views_publish,
            "users.info": self._users_info,
            "users.lookupByEmail": self._users_by_email,
            "usergroups.users.list": self._usergroup_users,
            "conversations.info": self._conversations_info,
            "conversations.members": self._conversations_members,
            "conversations.history": self._conversations_history,
            "conversations.replies": self._conversations_replies,
            "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> SlackAPIStandIn:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_post("/hooks/{name}", self._hook)
        self._runner, self._base = await serve_on_loopback(app, access_log=None)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closing.set()  # frees calls held by `hold`
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        """The Web API base URL, e.g. http://127.0.0.1:PORT/api/ (slack_sdk's `base_url`)."""
        if not self._base:
            raise RuntimeError("SlackAPIStandIn is not running: use it as `async with`")
        return f"{self._base}/api/"

    def response_url(self, name: str = "default") -> str:
        """A `response_url` on this server; posts to it are recorded as method "response_url"."""
        return f"{self._base}/hooks/{name}"

    # -- configuration -----------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        *,
        error: str | None = None,
        status: int = 200,
        retry_after: int | None = None,
        times: int = 1,
        where: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Make the next `times` calls to `method` fail (only calls whose params `where`
        accepts, when given: e.g. approval cards and not other posts).

        status 429 answers `{"ok": false, "error": "ratelimited"}` with `Retry-After`
        (default 1 s); status 200 answers `{"ok": false, "error": error}` (default
        "internal_error"); other statuses answer that status with the same body.
        """
        if status == 429:
            error = error or "ratelimited"
            retry_after = 1 if retry_after is None else retry_after
        failure = _Failure(error or "internal_error", status, retry_after, where)
        self._failures[method].extend(failure for _ in range(times))

    def hold(self, method: str) -> asyncio.Event:
        """Make calls to `method` hang (a Slack that does not answer) until the returned event
        is set, or the stand-in closes. Held calls are recorded once answered."""
        gate = asyncio.Event()
        self._held[method] = gate
        return gate

    def hang_after(
        self,
        method: str,
        *,
        times: int = 1,
        where: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Make the next `times` calls to `method` (whose params `where` accepts) take effect
        and be recorded, then never answer (until the stand-in closes): a Slack that posted the
        message while the bot, e.g., was killed waiting for the answer."""
        self._hung[method].extend(where for _ in range(times))

    def respond_with(self, method: str, answer: Answer) -> None:
        """Answer `method` with a fixed body, or with `answer(call)` (params already parsed)."""
        self._answers[method] = answer

    def expire_streams(self) -> None:
        """Slack ends the streaming state of every open stream (as it does after a while
        without appends): appending to one, or stopping it, answers
        `message_not_in_streaming_state`; the message stays, and can be updated."""
        for stream in self._streams.values():
            stream.active = False

    def set_streaming_supported(self, flag: bool, *, error: str = "unknown_method") -> None:
        """When False, chat.startStream/appendStream/stopStream answer `error` (Slack says
        `unknown_method`, or `feature_not_enabled`, `not_allowed`, `team_not_enabled` where the
        workspace or the app may not stream)."""
        self._streaming = flag
        self._streaming_refusal = error

    def set_user(self, user_id: str, **fields: Any) -> None:
        """What users.info answers for `user_id` (merged over a generated profile)."""
        self._users[user_id] = fields

    def set_usergroup_members(self, usergroup_id: str, members: list[str]) -> None:
        self._usergroups[usergroup_id] = list(members)

    def set_channel_members(self, channel_id: str, members: list[str]) -> None:
        """Who conversations.members says is in `channel_id` (unset: `channel_not_found`)."""
        self._members[channel_id] = list(members)

    def set_channel(self, channel_id: str, **fields: Any) -> None:
        """What conversations.info answers for `channel_id` (merged over generated fields)."""
        self._channels[channel_id] = fields

    # -- inspection --------------------------------------------------------------------------

    def calls_to(self, method: str) -> list[SlackCall]:
        return [call for call in self.calls if call.method == method]

    async def wait_for(
        self,
        method: str,
        *,
        count: int = 1,
        where: Callable[[SlackCall], bool] | None = None,
        timeout: float = 10,
    ) -> list[SlackCall]:
        """Wait until at least `count` calls to `method` (matching `where`) were answered.

        Returns every matching call so far, oldest first. Raises AssertionError on timeout,
        listing what was called instead.
        """

        def matching() -> list[SlackCall]:
            return [
                call
                for call in self.calls
                if call.method == method and (where is None or where(call))
            ]

        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: len(matching()) >= count), timeout
                )
            except TimeoutError:
                seen = [call.method for call in self.calls]
                raise AssertionError(
                    f"expected {count} call(s) to {method!r} within {timeout}s, "
                    f"got {len(matching())}; calls so far: {seen}"
                ) from None
            return matching()

    async def wait_until(self, ready: Callable[[], bool], *, timeout: float = 10) -> None:
        """Wait until `ready()` holds, checked after every call the stand-in answers."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(ready), timeout)

    async def wait_until_ended(self, marked: set[str], answer: str, *, timeout: float = 60) -> None:
        """Until the runs that marked the messages at `marked` ended: `answer` is in as many
        messages, and each message's 👀 was taken off or never shown (the outbox drops a
        reaction added and taken off before it sent either)."""

        def ended() -> bool:
            shown = [m for m in self._messages.values() if answer in str(m.get("text", ""))]
            if len(shown) < len(marked):
                return False
            added, removed = (
                {str(c.params.get("timestamp")) for c in self.calls_to(method) if c.ok}
                for method in ("reactions.add", "reactions.remove")
            )
            return all(ts in removed or ts not in added for ts in marked)

        await self.wait_until(ended, timeout=timeout)

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        """The current state of a message posted, updated or streamed through the stand-in."""
        message = self._messages.get((channel, ts))
        return None if message is None else dict(message)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """Every message still present (not deleted), in the order they were first posted."""
        return [dict(message) for message in self._messages.values()]

    def uploaded(self, file_id: str) -> UploadedFile:
        for upload in self.uploaded_files:
            if upload.file_id == file_id:
                return upload
        raise KeyError(f"no completed upload {file_id!r}")

    # -- HTTP --------------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _parse(request)
        if (gate := self._held.get(method)) is not None:
            async with self._changed:  # `wait_until` sees a held call arrive
                self.holding[method] = self.holding.get(method, 0) + 1
                self._changed.notify_all()
            await self._wait_held(gate)
        token = _bearer(request) or _pop_token(params)
        headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        refused = self._rate_limited(method, params, token)
        if refused is not None:  # over the limit: answered 429, recorded, not applied
            await self._record(SlackCall(method, params, headers, token, 429, refused[0]))
            return web.json_response(refused[0], status=429, headers=refused[1])
        status, body, extra_headers = self._answer(method, params, token, headers)
        await self._record(SlackCall(method, params, headers, token, status, body))
        if self._hangs(method, params):
            await self._closing.wait()
        return web.json_response(body, status=status, headers=extra_headers)

    def _rate_limited(
        self, method: str, params: dict[str, Any], token: str | None
    ) -> tuple[dict[str, Any], dict[str, str]] | None:
        if self.rate_limits is None or token is None:
            return None
        retry_after = self.rate_limits.retry_after(method, params, token)
        if retry_after is None:
            return None
        return {"ok": False, "error": "ratelimited"}, {"Retry-After": str(retry_after)}

    def _hangs(self, method: str, params: dict[str, Any]) -> bool:
        hung = self._hung.get(method)
        where = next((w for w in hung or () if w is None or w(params)), False)
        if hung and where is not False:
            hung.remove(where)
            return True
        return False

    async def _wait_held(self, gate: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(gate.wait()), asyncio.ensure_future(self._closing.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()

    def _answer(
        self, method: str, params: dict[str, Any], token: str | None, headers: dict[str, str]
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        failures = self._failures.get(method)
        failure = next((f for f in failures or () if f.where is None or f.where(params)), None)
        if failures and failure is not None:
            failures.remove(failure)
            extra = {}
            if failure.retry_after is not None:
                extra["Retry-After"] = str(failure.retry_after)
            return failure.status, {"ok": False, "error": failure.error}, extra
        if token is None:
            return 200, {"ok": False, "error": "not_authed"}, {}
        if method == "apps.connections.open":  # the one method that takes the app token
            return 200, self._connections_open(SlackCall(method, params, headers, token)), {}
        if self._token is not None and token != self._token:
            return 200, {"ok": False, "error": "invalid_auth"}, {}
        if method in self._answers:
            answer = self._answers[method]
            if callable(answer):
                answer = answer(SlackCall(method, params, headers, token))
            return 200, dict(answer), {}
        if method in _STREAM_METHODS and not self._streaming:
            return 200, {"ok": False, "error": self._streaming_refusal}, {}
        handler = self._handlers.get(method)
        if handler is None:
            return 200, {"ok": False, "error": "unknown_method"}, {}
        try:
            return 200, {"ok": True, **handler(params)}, {}
        except _SlackError as error:
            return 200, {"ok": False, "error": error.error}, {}

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        content = await request.read()
        headers = dict(request.headers)
        if file_id not in self._pending_uploads:
            await self._record(SlackCall("upload", {"file_id": file_id}, headers, None, 404))
            return web.Response(status=404, text="unknown upload")
        self._upload_content[file_id] = content
        params = {"file_id": file_id, "length": len(content)}
        await self._record(SlackCall("upload", params, headers, None, 200))
        return web.Response(text=f"OK - {len(content)}")

    async def _hook(self, request: web.Request) -> web.Response:
        params = await _parse(request)
        params["_hook"] = request.match_info["name"]
        headers = dict(request.headers)
        await self._record(SlackCall("response_url", params, headers, None, 200, {"ok": True}))
        return web.json_response({"ok": True})

    async def _record(self, call: SlackCall) -> None:
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    def _next_ts(self) -> str:
        """Slack's ts is the Unix time of the post: the stand-in's are now (so after every
        message a test sends, whose ts are of 2023), each later than the one before."""
        self._last_ts = max(time.time_ns() // 1000, self._last_ts + 1)
        return f"{self._last_ts // 1_000_000}.{self._last_ts % 1_000_000:06d}"

    # -- methods -----------------------------------------------------------------------------

    def _connections_open(self, call: SlackCall) -> dict[str, Any]:
        """Socket Mode's URL for an `xapp-` token (`tests.support.socket_mode` serves one)."""
        if not (call.token or "").startswith("xapp-"):
            return {"ok": False, "error": "not_allowed_token_type"}
        if (answer := self._answers.get(call.method)) is not None:
            return dict(answer(call) if callable(answer) else answer)
        return {"ok": True, "url": f"{self._base.replace('http', 'ws', 1)}/no-socket-mode-here"}

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://opsgate-test.slack.com/",
            "team": self.team,
            "user": "opsgate",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _new_message(self, params: dict[str, Any], ts: str) -> dict[str, Any]:
        message: dict[str, Any] = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "text": params.get("text", ""),
            "ts": ts,
            "team": self.team_id,
        }
        for key in ("blocks", "attachments", "thread_ts", "metadata"):
            if key in params:
                message[key] = params[key]
        return message

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _required(params, "channel", "channel_not_found")
        _check_content(params)
        ts = self._next_ts()
        message = self._new_message(params, ts)
        self._messages[(channel, ts)] = message
        return {"channel": channel, "ts": ts, "message": dict(message)}

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _required(params, "channel", "channel_not_found")
        ts = _required(params, "ts", "message_not_found")
        _check_content(params)
        if (channel, ts) in self._deleted:
            raise _SlackError("message_not_found")
        message = self._messages.setdefault((channel, ts), self._new_message({}, ts))
        for key in ("text", "blocks", "attachments", "metadata"):
            if key in params:
                message[key] = params[key]
        return {"channel": channel, "ts": ts, "text": message["text"], "message": dict(message)}

    def _post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        _required(params, "channel", "channel_not_found")
        _required(params, "user", "user_not_in_channel")
        _check_content(params)
        return {"message_ts": self._next_ts()}

    def _delete(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _required(params, "channel", "channel_not_found")
        ts = _required(params, "ts", "message_not_found")
        self._messages.pop((channel, ts), None)
        self._deleted.add((channel, ts))
        return {"channel": channel, "ts": ts}

    def _permalink(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _required(params, "channel", "channel_not_found")
        ts = _required(params, "message_ts", "message_not_found")
        link = f"https://opsgate-test.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        return {"channel": channel, "permalink": link}

    def _start_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _required(params, "channel", "channel_not_found")
        if not channel.startswith("D") and not (
            params.get("recipient_user_id") and params.get("recipient_team_id")
        ):
            # Slack requires both outside DMs; its exact error code is not documented here.
            raise _SlackError("invalid_arguments")
        ts = self._next_ts()
        message = self._new_message(params, ts)
        message["text"] = _stream_text(params)
        message["chunks"] = _stream_chunks(params)
        self._messages[(channel, ts)] = message
        self._streams[(channel, ts)] = _Stream(channel, ts)
        return {"channel": channel, "ts": ts}

    def _stream(self, params: dict[str, Any]) -> _Stream:
        channel = _required(params, "channel", "channel_not_found")
        ts = _required(params, "ts", "message_not_found")
        stream = self._streams.get((channel, ts))
        if stream is None:
            raise _SlackError("message_not_found")
        if not stream.active:
            raise _SlackError("message_not_in_streaming_state")
        return stream

    def _append_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._stream(params)
        chunks = _stream_chunks(params)
        message = self._messages[(stream.channel, stream.ts)]
        message["text"] += _stream_text(params)
        message.setdefault("chunks", []).extend(chunks)
        return {"channel": stream.channel, "ts": stream.ts}

    def _stop_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._stream(params)
        _check_content({**params, "text": "-"})
        message = self._messages[(stream.channel, stream.ts)]
        message.setdefault("chunks", []).extend(_stream_chunks(params))
        message["text"] += _stream_text(params)
        if "blocks" in params:
            message["blocks"] = params["blocks"]
        stream.active = False
        return {"channel": stream.channel, "ts": stream.ts, "message": dict(message)}

    def _assistant_thread(self, params: dict[str, Any]) -> tuple[str, str]:
        channel = _required(params, "channel_id", "channel_not_found")
        return channel, _required(params, "thread_ts", "invalid_thread_ts")

    def _set_status(self, params: dict[str, Any]) -> dict[str, Any]:
        thread = self._assistant_thread(params)
        status = params.get("status")
        if not isinstance(status, str):
            raise _SlackError("invalid_arguments")
        self.statuses[thread] = status
        return {}

    def _set_title(self, params: dict[str, Any]) -> dict[str, Any]:
        thread = self._assistant_thread(params)
        self.titles[thread] = _required(params, "title", "invalid_arguments")
        return {}

    def _set_prompts(self, params: dict[str, Any]) -> dict[str, Any]:
        # An agent app (`agent_view`) names no thread: the DM as a whole, keyed (channel, "").
        channel = _required(params, "channel_id", "channel_not_found")
        thread = (channel, str(params.get("thread_ts") or ""))
        prompts = params.get("prompts")
        if isinstance(prompts, str):
            prompts = json.loads(prompts)
        if not isinstance(prompts, list) or not 0 < len(prompts) <= _MAX_SUGGESTED_PROMPTS:
            raise _SlackError("invalid_arguments")
        if not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts):
            raise _SlackError("invalid_arguments")
        self.suggested_prompts[thread] = prompts
        return {}

    def _reaction_key(self, params: dict[str, Any]) -> tuple[str, str, str]:
        channel = _required(params, "channel", "channel_not_found")
        ts = _required(params, "timestamp", "message_not_found")
        name = _required(params, "name", "invalid_name")
        return channel, ts, name

    def _reaction_add(self, params: dict[str, Any]) -> dict[str, Any]:
        key = self._reaction_key(params)
        if key in self._reactions:
            raise _SlackError("already_reacted")
        self._reactions.add(key)
        return {}

    def _reaction_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        key = self._reaction_key(params)
        if key not in self._reactions:
            raise _SlackError("no_reaction")
        self._reactions.remove(key)
        return {}

    def _view(self, view: Any, view_id: str) -> dict[str, Any]:
        if not isinstance(view, dict):
            raise _SlackError("invalid_arguments")
        return {
            **view,
            "id": view_id,
            "team_id": self.team_id,
            "state": {"values": {}},
            "hash": f"{self._next_ts()}.opsgate",
            "app_id": "ATEST",
            "bot_id": self.bot_id,
        }

    def _views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        _required(params, "trigger_id", "invalid_trigger_id")
        number = next(self._numbers)
        return {"view": self._view(params.get("view"), f"V{number:08d}")}

    def _views_update(self, params: dict[str, Any]) -> dict[str, Any]:
        view_id = params.get("view_id") or params.get("external_id")
        if not view_id:
            raise _SlackError("not_found")
        return {"view": self._view(params.get("view"), str(view_id))}

    def _views_publish(self, params: dict[str, Any]) -> dict[str, Any]:
        user = _required(params, "user_id", "invalid_arguments")
        view = params.get("view")
        if isinstance(view, str):
            view = json.loads(view)
        if not isinstance(view, dict) or view.get("type") != "home":
            raise _SlackError("invalid_arguments")
        return {"view": self._view(view, f"VHOME{user}")}

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user_id = _required(params, "user", "user_not_found")
        user: dict[str, Any] = {
            "id": user_id,
            "team_id": self.team_id,
            "name": user_id.lower(),
            "real_name": f"User {user_id}",
            "deleted": False,
            "is_bot": False,
            "is_admin": False,
            "tz": "UTC",
            "profile": {"display_name": user_id.lower(), "real_name": f"User {user_id}"},
        }
        user.update(self._users.get(user_id, {}))
        return {"user": user}

    def _users_by_email(self, params: dict[str, Any]) -> dict[str, Any]:
        """The user whose `set_user` profile has this email; else `users_not_found`."""
        email = _required(params, "email", "users_not_found")
        for user_id, fields in self._users.items():
            if (fields.get("profile") or {}).get("email") == email:
                return self._users_info({"user": user_id})
        raise _SlackError("users_not_found")

    def _usergroup_users(self, params: dict[str, Any]) -> dict[str, Any]:
        group = _required(params, "usergroup", "no_such_subteam")
        if group not in self._usergroups:
            raise _SlackError("no_such_subteam")
        return {"users": list(self._usergroups[group])}

    def _conversations_members(self, params: dict[str, Any]) -> dict[str, Any]:
        """Pages of two members (Slack pages by `limit`; two shows that every page is read)."""
        channel = _required(params, "channel", "channel_not_found")
        if channel not in self._members:
            raise _SlackError("channel_not_found")
        start = int(params.get("cursor") or 0)
        members = self._members[channel]
        page = members[start : start + 2]
        more = start + 2 < len(members)
        return {
            "members": page,
            "response_metadata": {"next_cursor": str(start + 2) if more else ""},
        }

    def _conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        channel_id = _required(params, "channel", "channel_not_found")
        channel: dict[str, Any] = {
            "id": channel_id,
            "name": channel_id.lower(),
            "is_channel": channel_id.startswith("C"),
            "is_group": channel_id.startswith("G"),
            "is_im": channel_id.startswith("D"),
            "is_private": not channel_id.startswith("C"),
            "is_member": True,
            "is_archived": False,
        }
        channel.update(self._channels.get(channel_id, {}))
        return {"channel": channel}

    def _conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        """The thread's messages, oldest first; metadata only with `include_all_metadata`
        (as Slack does). One page: the stand-in's threads are short."""
        channel = _required(params, "channel", "channel_not_found")
        ts = _required(params, "ts", "thread_not_found")
        with_metadata = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        thread = [
            dict(message)
            for (in_channel, message_ts), message in self._messages.items()
            if in_channel == channel and ts in (message_ts, message.get("thread_ts"))
        ]
        if not thread:
            raise _SlackError("thread_not_found")
        for message in thread:
            if not with_metadata:
                message.pop("metadata", None)
        thread.sort(key=lambda m: float(m["ts"]))
        return {"messages": thread, "has_more": False, "response_metadata": {"next_cursor": ""}}

    def _conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        """The channel's messages (not thread replies) at `oldest` or later, newest first, as
        Slack lists them; metadata only with `include_all_metadata`. One page."""
        channel = _required(params, "channel", "channel_not_found")
        oldest = float(params.get("oldest") or 0)
        with_metadata = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        listed = [
            dict(message)
            for (in_channel, ts), message in self._messages.items()
            if in_channel == channel
            and message.get("thread_ts") in (None, ts)
            and float(ts) >= oldest
        ]
        for message in listed:
            if not with_metadata:
                message.pop("metadata", None)
        listed.sort(key=lambda m: float(m["ts"]), reverse=True)
        return {"messages": listed, "has_more": False, "response_metadata": {"next_cursor": ""}}

    def _upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename = _required(params, "filename", "invalid_arguments")
        length = str(params.get("length", ""))
        if not length.isdigit():
            raise _SlackError("invalid_arguments")
        file_id = f"F{next(self._numbers):08d}"
        self._pending_uploads[file_id] = {"filename": filename, "length": int(length)}
        return {"upload_url": f"{self._base}/upload/{file_id}", "file_id": file_id}

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        files = params.get("files")
        if not isinstance(files, list) or not files:
            raise _SlackError("invalid_arguments")
        completed = []
        for entry in files:
            file_id = entry.get("id") if isinstance(entry, dict) else None
            if file_id not in self._upload_content:
                raise _SlackError("file_not_found")
            pending = self._pending_uploads.pop(file_id)
            content = self._upload_content.pop(file_id)
            upload = UploadedFile(
                file_id=file_id,
                filename=pending["filename"],
                title=entry.get("title"),
                content=content,
                channel_id=params.get("channel_id"),
                thread_ts=params.get("thread_ts"),
                initial_comment=params.get("initial_comment"),
            )
            self.uploaded_files.append(upload)
            completed.append(
                {
                    "id": file_id,
                    "name": upload.filename,
                    "title": upload.title or upload.filename,
                    "size": len(content),
                    "mimetype": "text/plain",
                    "channels": [upload.channel_id] if upload.channel_id else [],
                }
            )
        return {"files": completed}


# -- request parsing and checks ----------------------------------------------------------------


async def _parse(request: web.Request) -> dict[str, Any]:
    params: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        raw = await request.read()
        if raw:
            body = json.loads(raw)
            if isinstance(body, dict):
                params.update(body)
    elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.post()
        for key in set(form.keys()):
            values = [_form_value(value) for value in form.getall(key)]
            params[key] = values[0] if len(values) == 1 else values
    for key in _JSON_FIELDS:
        value = params.get(key)
        if isinstance(value, str):
            try:
                decoded = json.loads(value)
            except ValueError:
                continue
            if isinstance(decoded, list | dict):
                params[key] = decoded
    return params


def _form_value(value: Any) -> Any:
    if isinstance(value, web.FileField):
        return {
            "filename": value.filename,
            "content_type": value.content_type,
            "content": value.file.read(),
        }
    return value


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer ") and header[len("Bearer ") :].strip():
        return header[len("Bearer ") :].strip()
    return None


def _pop_token(params: dict[str, Any]) -> str | None:
    token = params.pop("token", None)
    return token if isinstance(token, str) and token else None


def _required(params: Mapping[str, Any], key: str, error: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise _SlackError(error)
    return value


def _stream_text(params: Mapping[str, Any]) -> str:
    text = params.get("markdown_text")
    parts = [text] if isinstance(text, str) else []
    chunks = params.get("chunks")
    if isinstance(chunks, list):
        for chunk in chunks:
            if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
                parts.append(str(chunk.get("text", "")))
    return "".join(parts)


def _stream_chunks(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A stream call's chunks, refused (`invalid_chunks`) where Slack would refuse them: a
    task_update without its id, title or a known status, or a field past 256 characters; a
    plan_update without its title, or one past 256 characters."""
    chunks = params.get("chunks")
    if chunks is None:
        return []
    if not isinstance(chunks, list):
        raise _SlackError("invalid_chunks")
    for chunk in chunks:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("type"), str):
            raise _SlackError("invalid_chunks")
        if chunk["type"] == "plan_update":
            title = chunk.get("title")
            if not isinstance(title, str) or not title or len(title) > _MAX_TASK_FIELD:
                raise _SlackError("invalid_chunks")
            continue
        if chunk["type"] != "task_update":
            continue
        if not chunk.get("id") or not chunk.get("title"):
            raise _SlackError("invalid_chunks")
        if chunk.get("status") not in _TASK_STATUSES:
            raise _SlackError("invalid_chunks")
        for key in ("title", "details", "output"):
            if len(str(chunk.get(key) or "")) > _MAX_TASK_FIELD:
                raise _SlackError("invalid_chunks")
    return [dict(c) for c in chunks]


def _check_content(params: Mapping[str, Any]) -> None:
    """Slack's checks on message content that a bot can trip over."""
    text = params.get("text")
    blocks = params.get("blocks")
    if not text and not blocks and not params.get("attachments"):
        raise _SlackError("no_text")
    if isinstance(text, str) and len(text) > _MAX_MESSAGE_TEXT:
        raise _SlackError("msg_too_long")
    if blocks is not None and not _blocks_valid(blocks):
        raise _SlackError("invalid_blocks")


def _blocks_valid(blocks: Any) -> bool:
    if not isinstance(blocks, list) or len(blocks) > _MAX_BLOCKS:
        return False
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return False
        text = block.get("text")
        text = text.get("text", "") if isinstance(text, dict) else ""
        if block["type"] == "section" and len(text) > _MAX_SECTION_TEXT:
            return False
        if block["type"] == "header" and len(text) > _MAX_HEADER_TEXT:
            return False
        if block["type"] == "actions":
            for element in block.get("elements", []):
                value = element.get("value", "") if isinstance(element, dict) else ""
                if len(str(value)) > _MAX_BUTTON_VALUE:
                    return False
    return True
