"""The local workspace's Slack Web API: `POST /api/{method}`, answering the calls the bot makes
with the shapes Slack answers them with, on the workspace's state.

The bot's `SLACK_API_URL` points here, so its Web API client, pacing, outbox and streaming are
the ones it uses with Slack. Errors are Slack's: HTTP 200 with `{"ok": false, "error": …}`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from .state import (
    BOT,
    PEOPLE,
    TEAM,
    TEAM_NAME,
    OpenView,
    WorkspaceState,
    channel_by_id,
    home_view_id,
    person,
)

__all__ = ["SlackError", "WebAPI", "parse_params", "stream_chunks", "stream_text"]

_JSON_FIELDS = ("blocks", "attachments", "view", "files", "metadata", "chunks", "prompts")
_MESSAGE_FIELDS = ("blocks", "attachments", "thread_ts", "metadata")


class SlackError(Exception):
    """A call Slack would refuse; `error` is Slack's error code."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


Handler = Callable[[dict[str, Any]], dict[str, Any]]


class WebAPI:
    """Slack's Web API methods the bot calls, on `state`, for the bot's `token`."""

    def __init__(self, state: WorkspaceState, *, token: str, base_url: str) -> None:
        self.state = state
        self.token = token
        self.base_url = base_url
        """The server's root (`http://127.0.0.1:PORT`): upload URLs and permalinks are on it."""
        self._numbers = itertools.count(100)
        self._uploads: dict[str, dict[str, Any]] = {}
        self._handlers: dict[str, Handler] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "chat.delete": self._delete,
            "chat.getPermalink": self._permalink,
            "chat.startStream": self._start_stream,
            "chat.appendStream": self._append_stream,
            "chat.stopStream": self._stop_stream,
            "assistant.threads.setStatus": _accepted,
            "assistant.threads.setTitle": _accepted,
            "assistant.threads.setSuggestedPrompts": _accepted,
            "reactions.add": self._reaction_add,
            "reactions.remove": self._reaction_remove,
            "views.open": self._views_open,
            "views.push": self._views_open,
            "views.update": self._views_update,
            "views.publish": self._views_publish,
            "users.info": self._users_info,
            "usergroups.users.list": _no_groups,
            "conversations.info": self._conversations_info,
            "conversations.members": self._conversations_members,
            "conversations.history": self._conversations_history,
            "conversations.replies": self._conversations_replies,
            "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }

    def routes(self) -> list[web.RouteDef]:
        return [
            web.route("*", "/api/{method}", self.handle),
            web.post("/upload/{file_id}", self._upload),
        ]

    async def handle(self, request: web.Request) -> web.Response:
        params = await parse_params(request)
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip() or str(params.pop("token", "") or "")
        return web.json_response(self.call(request.match_info["method"], params, token))

    def call(self, method: str, params: dict[str, Any], token: str) -> dict[str, Any]:
        """One Web API call: Slack's answer to it."""
        if not token:
            return {"ok": False, "error": "not_authed"}
        if token != self.token:
            return {"ok": False, "error": "invalid_auth"}
        handler = self._handlers.get(method)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        try:
            return {"ok": True, **handler(params)}
        except SlackError as error:
            return {"ok": False, "error": error.error}

    # -- messages ------------------------------------------------------------------------------

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": f"{self.base_url}/",
            "team": TEAM_NAME,
            "user": BOT.name.lower(),
            "team_id": TEAM,
            "user_id": BOT.user_id,
            "bot_id": BOT.bot_id,
            "is_enterprise_install": False,
        }

    def _new_message(self, params: Mapping[str, Any], ts: str) -> dict[str, Any]:
        message: dict[str, Any] = {
            "type": "message",
            "user": BOT.user_id,
            "bot_id": BOT.bot_id,
            "app_id": BOT.app_id,
            "text": params.get("text", ""),
            "ts": ts,
            "team": TEAM,
        }
        message.update({k: params[k] for k in _MESSAGE_FIELDS if k in params})
        return message

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _channel(params, "channel")
        _check_content(params)
        message = self.state.put(channel, self._new_message(params, self.state.next_ts()))
        return {"channel": channel, "ts": message["ts"], "message": dict(message)}

    def _existing(self, params: Mapping[str, Any], ts_key: str = "ts") -> tuple[str, str]:
        channel = _channel(params, "channel")
        ts = _required(params, ts_key, "message_not_found")
        if self.state.message(channel, ts) is None:
            raise SlackError("message_not_found")
        return channel, ts

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = self._existing(params)
        _check_content(params)
        message = dict(self.state.messages[(channel, ts)])
        message.update(
            {k: params[k] for k in ("text", "blocks", "attachments", "metadata") if k in params}
        )
        message["edited"] = {"user": BOT.user_id, "ts": self.state.next_ts()}
        self.state.put(channel, message)
        return {"channel": channel, "ts": ts, "text": message["text"], "message": dict(message)}

    def _post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _channel(params, "channel")
        user = _required(params, "user", "user_not_in_channel")
        if person(user) is None:
            raise SlackError("user_not_in_channel")
        _check_content(params)
        message = self._new_message(params, self.state.next_ts())
        message["ephemeral_for"] = user
        self.state.put(channel, message)
        return {"message_ts": message["ts"]}

    def _delete(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = self._existing(params)
        self.state.delete(channel, ts)
        return {"channel": channel, "ts": ts}

    def _permalink(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = self._existing(params, "message_ts")
        found = channel_by_id(channel)
        where = found.name if found else channel
        return {"channel": channel, "permalink": f"{self.base_url}/#{where}/{ts}"}

    # -- streams -------------------------------------------------------------------------------

    def _start_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _channel(params, "channel")
        if not channel.startswith("D") and not (
            params.get("recipient_user_id") and params.get("recipient_team_id")
        ):
            raise SlackError("invalid_arguments")  # Slack needs both outside DMs
        message = self._new_message(params, self.state.next_ts())
        message.update(text=stream_text(params), chunks=stream_chunks(params), streaming=True)
        self.state.put(channel, message)
        return {"channel": channel, "ts": message["ts"]}

    def _streaming(self, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        channel, ts = self._existing(params)
        message = dict(self.state.messages[(channel, ts)])
        if not message.get("streaming"):
            raise SlackError("message_not_in_streaming_state")
        return channel, message

    def _append_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, message = self._streaming(params)
        message["chunks"] = [*message.get("chunks", []), *stream_chunks(params)]
        message["text"] += stream_text(params)
        self.state.put(channel, message)
        return {"channel": channel, "ts": message["ts"]}

    def _stop_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, message = self._streaming(params)
        _check_content({**params, "text": "-"})
        message["chunks"] = [*message.get("chunks", []), *stream_chunks(params)]
        message["text"] += stream_text(params)
        if "blocks" in params:
            message["blocks"] = params["blocks"]
        message.pop("streaming", None)
        self.state.put(channel, message)
        return {"channel": channel, "ts": message["ts"], "message": dict(message)}

    # -- reactions -----------------------------------------------------------------------------

    def _reaction(self, params: Mapping[str, Any], add: bool) -> dict[str, Any]:
        channel, ts = self._existing(params, "timestamp")
        name = _required(params, "name", "invalid_name")
        message = dict(self.state.messages[(channel, ts)])
        reactions = [dict(r) for r in message.get("reactions", [])]
        found = next((r for r in reactions if r["name"] == name), None)
        has = found is not None and BOT.user_id in found["users"]
        if add and has:
            raise SlackError("already_reacted")
        if not add and not has:
            raise SlackError("no_reaction")
        if add:
            found = found or {"name": name, "users": [], "count": 0}
            if found not in reactions:
                reactions.append(found)
            found["users"] = [*found["users"], BOT.user_id]
        elif found is not None:
            found["users"] = [u for u in found["users"] if u != BOT.user_id]
        for reaction in reactions:
            reaction["count"] = len(reaction["users"])
        message["reactions"] = [r for r in reactions if r["count"]]
        self.state.put(channel, message)
        return {}

    def _reaction_add(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._reaction(params, add=True)

    def _reaction_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._reaction(params, add=False)

    # -- views ---------------------------------------------------------------------------------

    def _view(self, view: Any, view_id: str) -> dict[str, Any]:
        if not isinstance(view, dict) or view.get("type") not in ("modal", "home"):
            raise SlackError("invalid_arguments")
        return {
            **view,
            "id": view_id,
            "team_id": TEAM,
            "state": {"values": {}},
            "hash": f"{self.state.next_ts()}.local",
            "app_id": BOT.app_id,
            "bot_id": BOT.bot_id,
        }

    def _views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        user = self.state.triggers.pop(_required(params, "trigger_id", "invalid_trigger_id"), None)
        if user is None:
            raise SlackError("expired_trigger_id")
        view = self._view(params.get("view"), f"V{next(self._numbers):08d}")
        self.state.put_view(OpenView(view["id"], user, view))
        return {"view": view}

    def _views_update(self, params: dict[str, Any]) -> dict[str, Any]:
        view_id = str(params.get("view_id") or params.get("external_id") or "")
        old = self.state.views.get(view_id)
        if old is None:
            raise SlackError("not_found")
        view = self._view(params.get("view"), view_id)
        self.state.put_view(OpenView(view_id, old.user_id, view))
        return {"view": view}

    def _views_publish(self, params: dict[str, Any]) -> dict[str, Any]:
        user = _required(params, "user_id", "invalid_arguments")
        view = params.get("view")
        if not isinstance(view, dict) or view.get("type") != "home":
            raise SlackError("invalid_arguments")
        published = self._view(view, home_view_id(user))
        self.state.put_view(OpenView(published["id"], user, published))
        return {"view": published}

    # -- people and conversations --------------------------------------------------------------

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user_id = _required(params, "user", "user_not_found")
        found = person(user_id)
        if found is None and user_id != BOT.user_id:
            raise SlackError("user_not_found")
        name = found.name if found else BOT.name
        return {
            "user": {
                "id": user_id,
                "team_id": TEAM,
                "name": name.lower(),
                "real_name": name,
                "deleted": False,
                "is_bot": found is None,
                "is_admin": False,
                "tz": "UTC",
                "profile": {"display_name": name, "real_name": name},
            }
        }

    def _conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        channel_id = _channel(params, "channel")
        found = channel_by_id(channel_id)
        assert found is not None  # `_channel` checked it
        is_im = found.kind == "im"
        return {
            "channel": {
                "id": channel_id,
                "name": found.name,
                "is_channel": not is_im,
                "is_group": False,
                "is_im": is_im,
                "is_private": is_im,
                "is_member": True,
                "is_archived": False,
            }
        }

    def _conversations_members(self, params: dict[str, Any]) -> dict[str, Any]:
        channel_id = _channel(params, "channel")
        if channel_id.startswith("D"):
            members = ["U" + channel_id.removeprefix("D"), BOT.user_id]
        else:
            members = [p.user_id for p in PEOPLE] + [BOT.user_id]
        return {"members": members, "response_metadata": {"next_cursor": ""}}

    def _listed(self, params: Mapping[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
        with_metadata = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        listed = [
            {k: v for k, v in m.items() if k not in ("streaming", "ephemeral_for")}
            for m in messages
            if "ephemeral_for" not in m
        ]
        for message in listed:
            if not with_metadata:
                message.pop("metadata", None)
        return {"messages": listed, "has_more": False, "response_metadata": {"next_cursor": ""}}

    def _conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        """Top-level messages at `oldest` or later, newest first; one page."""
        channel = _channel(params, "channel")
        oldest = float(params.get("oldest") or 0)
        top = [
            m
            for m in self.state.in_channel(channel)
            if m.get("thread_ts") in (None, m["ts"]) and float(m["ts"]) >= oldest
        ]
        return self._listed(params, top[::-1])

    def _conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _channel(params, "channel")
        ts = _required(params, "ts", "thread_not_found")
        thread = [m for m in self.state.in_channel(channel) if ts in (m["ts"], m.get("thread_ts"))]
        if not thread:
            raise SlackError("thread_not_found")
        return self._listed(params, thread)

    # -- files ---------------------------------------------------------------------------------

    def _upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename = _required(params, "filename", "invalid_arguments")
        file_id = f"F{next(self._numbers):08d}"
        self._uploads[file_id] = {"name": filename}
        return {"upload_url": f"{self.base_url}/upload/{file_id}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.Response:
        upload = self._uploads.get(request.match_info["file_id"])
        if upload is None:
            return web.Response(status=404, text="unknown upload")
        content = await request.read()
        upload["content"] = content.decode("utf-8", errors="replace")
        return web.Response(text=f"OK - {len(content)}")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        files = params.get("files")
        if not isinstance(files, list) or not files:
            raise SlackError("invalid_arguments")
        shared = []
        for entry in files:
            upload = (
                self._uploads.pop(str(entry.get("id")), None) if isinstance(entry, dict) else None
            )
            if upload is None or "content" not in upload:
                raise SlackError("file_not_found")
            title = entry.get("title") or upload["name"]
            shared.append({"id": entry["id"], "name": upload["name"], "title": title, **upload})
        channel = str(params.get("channel_id") or "")
        if channel_by_id(channel) is not None:
            fields = {"text": params.get("initial_comment") or "", "files": shared}
            if params.get("thread_ts"):
                fields["thread_ts"] = params["thread_ts"]
            self.state.put(channel, self._new_message(fields, self.state.next_ts()) | fields)
        return {"files": [{k: v for k, v in f.items() if k != "content"} for f in shared]}


# -- parsing and checks ----------------------------------------------------------------------


async def parse_params(request: web.Request) -> dict[str, Any]:
    """A Web API call's parameters: query, JSON or form fields, JSON-valued ones decoded."""
    params: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        if isinstance(body, dict):
            params.update(body)
    elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.post()
        params.update({key: form[key] for key in form if isinstance(form[key], str)})
    for key in _JSON_FIELDS:
        value = params.get(key)
        if isinstance(value, str):
            try:
                params[key] = json.loads(value)
            except ValueError:
                continue
    return params


def _accepted(params: dict[str, Any]) -> dict[str, Any]:
    return {}


def _no_groups(params: dict[str, Any]) -> dict[str, Any]:
    raise SlackError("no_such_subteam")  # the local workspace has no user groups


def _required(params: Mapping[str, Any], key: str, error: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise SlackError(error)
    return value


def _channel(params: Mapping[str, Any], key: str) -> str:
    channel = _required(params, key, "channel_not_found")
    if channel_by_id(channel) is None:
        raise SlackError("channel_not_found")
    return channel


def stream_text(params: Mapping[str, Any]) -> str:
    """The markdown a stream call adds: `markdown_text` and its markdown chunks."""
    text = params.get("markdown_text")
    parts = [text] if isinstance(text, str) else []
    for chunk in params.get("chunks") or []:
        if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
            parts.append(str(chunk.get("text", "")))
    return "".join(parts)


def stream_chunks(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A stream call's chunks other than its text (task and plan updates: the timeline)."""
    chunks = params.get("chunks") or []
    if not isinstance(chunks, list) or not all(isinstance(c, dict) for c in chunks):
        raise SlackError("invalid_chunks")
    return [dict(c) for c in chunks if c.get("type") != "markdown_text"]


def _check_content(params: Mapping[str, Any]) -> None:
    text = params.get("text")
    blocks = params.get("blocks")
    if not text and not blocks and not params.get("attachments"):
        raise SlackError("no_text")
    if isinstance(text, str) and len(text) > 40_000:
        raise SlackError("msg_too_long")
    if blocks is not None and (not isinstance(blocks, list) or len(blocks) > 50):
        raise SlackError("invalid_blocks")
