"""The page and what it asks of the workspace: the static files (package data, no build step),
the state each person sees, and what they do (write, click, submit a modal, open Home).

Each thing a person does becomes what Slack would make of it: a message in the workspace's
state and the event for it, a `block_actions`, a `view_submission` or a slash command, signed
and posted to the bot (`bot.workspace.events`). The bot answers through the Web API, which
changes the state; the page, waiting on `/workspace/state`, redraws.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from ..policy import Policy
from . import events
from .events import EventSender
from .state import (
    ALERT_BOT,
    BOT,
    CHANNELS,
    PEOPLE,
    TEAM,
    Channel,
    PolicyText,
    WorkspaceState,
    channel_named,
    dm_of,
    person,
)

__all__ = ["Page"]

_STATIC = {"app.js": "text/javascript", "style.css": "text/css", "blocks.js": "text/javascript"}
_WAIT = 25.0
"""Longest a page's request for news waits before it is answered with the state as it is."""
_NAME_MENTION = re.compile(r"@(\w+)")


@dataclass(frozen=True)
class _Hook:
    """Where a `response_url` answer goes: to whom, in which channel."""

    user: str
    channel: str
    message_ts: str | None = None
    """The ephemeral message a click came from (`replace_original` replaces it)."""


class Page:
    """The routes of the page, on the workspace's state, sending to the bot through `sender`."""

    def __init__(
        self,
        state: WorkspaceState,
        sender: EventSender,
        *,
        base_url: str,
        policy: Policy,
        policy_text: PolicyText,
        model_note: str | None,
        explain: Callable[[Policy, str], str],
    ) -> None:
        self.state = state
        self.sender = sender
        self.base_url = base_url
        self.policy = policy
        self.policy_text = policy_text
        self.model_note = model_note
        """What the page says of the model ("demo model: …"), None for a real one."""
        self.explain = explain
        """`opsgate policy explain run_command COMMAND`'s text for a policy."""
        self._hooks: dict[str, _Hook] = {}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self._file("index.html")),
            web.get("/policy", self._file("policy.html")),
            web.get("/static/{name}", self._static),
            web.get("/workspace/state", self._state),
            web.get("/workspace/policy", self._explain),
            web.post("/workspace/message", self._message),
            web.post("/workspace/action", self._action),
            web.post("/workspace/submit", self._submit),
            web.post("/workspace/close", self._close),
            web.post("/workspace/home", self._home),
            web.post("/workspace/alert", self._alert),
            web.post("/workspace/hooks/{hook}", self._hook),
        ]

    # -- files ---------------------------------------------------------------------------------

    def _file(self, name: str) -> Any:
        async def serve(request: web.Request) -> web.Response:
            return web.Response(text=_read(name), content_type="text/html", charset="utf-8")

        return serve

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _STATIC:
            raise web.HTTPNotFound()
        return web.Response(text=_read(name), content_type=_STATIC[name], charset="utf-8")

    # -- what a person sees --------------------------------------------------------------------

    async def _state(self, request: web.Request) -> web.Response:
        user = _user(request.query.get("user", ""))
        after = int(request.query.get("after") or 0)
        if request.query.get("epoch") == self.state.epoch:  # else it saw another process
            await self.state.wait_newer(after, _WAIT)
        return web.json_response(self.snapshot(user))

    def snapshot(self, user: str) -> dict[str, Any]:
        """Everything `user` sees: the channels' messages (their own ephemeral ones among
        them), their open modal and their Home tab."""
        channels = [*CHANNELS, dm_of(user)]
        messages = {
            c.name: [
                m
                for m in self.state.in_channel(c.channel_id)
                if m.get("ephemeral_for") in (None, user)
            ]
            for c in channels
        }
        modal = self.state.modal_of(user)
        home = self.state.home_of(user)
        names = {p.user_id: p.name for p in PEOPLE} | {BOT.user_id: BOT.name}
        names[ALERT_BOT.user_id] = ALERT_BOT.name
        names |= {c.channel_id: c.name for c in CHANNELS}  # `<#C…>` shows the channel's name
        return {
            "version": self.state.version,
            "epoch": self.state.epoch,
            "user": user,
            "people": [{"id": p.user_id, "name": p.name, "role": p.role} for p in PEOPLE],
            "channels": [_channel(c) for c in channels],
            "messages": messages,
            "modal": None
            if modal is None
            else {"id": modal.view_id, "view": modal.view, "errors": modal.errors},
            "home": None if home is None else home.view,
            "names": names,
            "bot": {"user": BOT.user_id, "bot_id": BOT.bot_id, "name": BOT.name},
            "model_note": self.model_note,
            "policy": self.policy_text.source,
        }

    async def _explain(self, request: web.Request) -> web.Response:
        command = request.query.get("command", "").strip()
        answer = self.explain(self.policy, command) if command else ""
        return web.json_response(
            {"source": self.policy_text.source, "text": self.policy_text.text, "explain": answer}
        )

    # -- what a person does --------------------------------------------------------------------

    async def _message(self, request: web.Request) -> web.Response:
        body = await _json(request)
        user = _user(str(body.get("user") or ""))
        channel = _conversation(str(body.get("channel") or ""), user)
        text = str(body.get("text") or "").strip()
        thread_ts = str(body.get("thread_ts") or "") or None
        if not text:
            raise web.HTTPBadRequest(text="an empty message")
        if text.startswith("/opsgate"):
            reply = await self._slash(user, channel, text.removeprefix("/opsgate").strip())
            return web.json_response({"status": reply.status})
        message = self._user_message(user, channel, text, thread_ts)
        self.state.put(channel.channel_id, message)
        sent = await self.sender.event(events.message_event(message, channel.channel_id))
        if f"<@{BOT.user_id}>" in message["text"] and channel.kind != "im":
            await self.sender.event(events.message_event(message, channel.channel_id, mention=True))
        return web.json_response({"ts": message["ts"], "status": sent.status})

    def _user_message(
        self, user: str, channel: Channel, text: str, thread_ts: str | None
    ) -> dict[str, Any]:
        text = _NAME_MENTION.sub(_mention, text)
        message: dict[str, Any] = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": self.state.next_ts(),
            "team": TEAM,
            "client_msg_id": secrets.token_hex(16),
        }
        if thread_ts:
            parent = self.state.message(channel.channel_id, thread_ts)
            message["thread_ts"] = thread_ts
            message["parent_user_id"] = (parent or {}).get("user", user)
        return message

    async def _slash(self, user: str, channel: Channel, text: str) -> events.BotReply:
        hook = self._new_hook(_Hook(user, channel.channel_id))
        trigger = self._trigger(user)
        fields = events.slash_command(
            user, channel.channel_id, text, trigger_id=trigger, response_url=hook
        )
        reply = await self.sender.command(fields)
        if reply.body.get("text") or reply.body.get("blocks"):  # an ack with words
            self._answer_hook(_Hook(user, channel.channel_id), reply.body)
        return reply

    async def _action(self, request: web.Request) -> web.Response:
        body = await _json(request)
        user = _user(str(body.get("user") or ""))
        action = {
            "action_id": str(body.get("action_id") or ""),
            "block_id": str(body.get("block_id") or ""),
            "value": str(body.get("value") or ""),
            "type": "button",
            "text": {"type": "plain_text", "text": str(body.get("text") or "")},
        }
        trigger = self._trigger(user)
        if view_id := body.get("view_id"):
            view = self.state.views.get(str(view_id))
            if view is None:
                raise web.HTTPNotFound(text=f"no view {view_id!r}")
            payload = events.home_actions(user, view.view, action, trigger)
        else:
            channel = _conversation(str(body.get("channel") or ""), user)
            message = self.state.message(channel.channel_id, str(body.get("ts") or ""))
            if message is None:
                raise web.HTTPNotFound(text="no such message")
            hook = self._new_hook(_Hook(user, channel.channel_id, message["ts"]))
            payload = events.block_actions(
                user, channel.channel_id, message, action, trigger_id=trigger, response_url=hook
            )
        reply = await self.sender.interaction(payload)
        return web.json_response({"status": reply.status})

    async def _submit(self, request: web.Request) -> web.Response:
        body = await _json(request)
        user = _user(str(body.get("user") or ""))
        open_ = self.state.views.get(str(body.get("view_id") or ""))
        if open_ is None or open_.user_id != user:
            raise web.HTTPNotFound(text="no such modal open")
        values = _state_values(open_.view, body.get("values") or {})
        payload = events.view_submission(user, open_.view, values, self._trigger(user))
        reply = await self.sender.interaction(payload)
        action = reply.body.get("response_action")
        if action == "errors":
            errors = {str(k): str(v) for k, v in (reply.body.get("errors") or {}).items()}
            self.state.put_view(type(open_)(open_.view_id, user, open_.view, errors))
        elif action in ("update", "push") and isinstance(reply.body.get("view"), dict):
            self.state.put_view(type(open_)(open_.view_id, user, reply.body["view"]))
        elif reply.status == 200:
            self.state.drop_view(open_.view_id)
        return web.json_response({"status": reply.status, "response_action": action})

    async def _close(self, request: web.Request) -> web.Response:
        body = await _json(request)
        user = _user(str(body.get("user") or ""))
        open_ = self.state.views.get(str(body.get("view_id") or ""))
        if open_ is not None and open_.user_id == user:
            self.state.drop_view(open_.view_id)
        return web.json_response({"ok": True})

    async def _home(self, request: web.Request) -> web.Response:
        body = await _json(request)
        user = _user(str(body.get("user") or ""))
        reply = await self.sender.event(events.app_home_opened(user))
        return web.json_response({"status": reply.status})

    async def _alert(self, request: web.Request) -> web.Response:
        """A sample alert in `#alerts`, posted by the Alertmanager integration."""
        body = await _json(request)
        title = str(body.get("text") or "").strip() or "DiskFull: / on web-1 is 97% full"
        channel = channel_named("alerts")
        assert channel is not None
        message = {
            "type": "message",
            "subtype": "bot_message",
            "text": f"[FIRING] {title}",
            "ts": self.state.next_ts(),
            "team": TEAM,
            "bot_id": ALERT_BOT.bot_id,
            "username": ALERT_BOT.name,
            "bot_profile": {
                "id": ALERT_BOT.bot_id,
                "app_id": ALERT_BOT.app_id,
                "name": ALERT_BOT.name,
                "team_id": TEAM,
                "deleted": False,
            },
            "attachments": [
                {"color": "#d72b3f", "title": title, "text": "severity: warning · host: web-1"}
            ],
        }
        self.state.put(channel.channel_id, message)
        reply = await self.sender.event(events.message_event(message, channel.channel_id))
        return web.json_response({"ts": message["ts"], "status": reply.status})

    # -- response_url --------------------------------------------------------------------------

    def _new_hook(self, hook: _Hook) -> str:
        name = secrets.token_urlsafe(12)
        self._hooks[name] = hook
        return f"{self.base_url}/workspace/hooks/{name}"

    def _trigger(self, user: str) -> str:
        trigger = self.sender.trigger()
        self.state.triggers[trigger] = user
        return trigger

    async def _hook(self, request: web.Request) -> web.Response:
        hook = self._hooks.get(request.match_info["hook"])
        if hook is None:
            raise web.HTTPNotFound(text="no such response_url")
        body = await _json(request)
        self._answer_hook(hook, body)
        return web.json_response({"ok": True})

    def _answer_hook(self, hook: _Hook, body: Mapping[str, Any]) -> None:
        """An answer to a `response_url` (or a slash command's ack): an ephemeral message for
        whoever asked, replacing or deleting the one clicked when it says so."""
        if body.get("delete_original") and hook.message_ts:
            self.state.delete(hook.channel, hook.message_ts)
            return
        replacing = bool(body.get("replace_original")) and hook.message_ts
        ts = hook.message_ts if replacing and hook.message_ts else self.state.next_ts()
        message: dict[str, Any] = {
            "type": "message",
            "user": BOT.user_id,
            "bot_id": BOT.bot_id,
            "text": str(body.get("text") or ""),
            "ts": ts,
            "team": TEAM,
        }
        if body.get("blocks"):
            message["blocks"] = body["blocks"]
        if body.get("response_type") != "in_channel":
            message["ephemeral_for"] = hook.user
        self.state.put(hook.channel, message)


async def _json(request: web.Request) -> dict[str, Any]:
    """The request's JSON object. Only `application/json`: another site's page cannot send that
    to this one without the browser asking first (CORS), which this server never allows, so it
    cannot click or write here on behalf of whoever has the workspace open."""
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(text="send application/json")
    body = await request.json()
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="send a JSON object")
    return body


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def _user(user_id: str) -> str:
    if person(user_id) is None:
        raise web.HTTPBadRequest(text=f"no local user {user_id!r}")
    return user_id


def _conversation(name: str, user: str) -> Channel:
    """A channel by its page name (`ops`, `alerts`, `dm`) or its id."""
    if name in ("dm", dm_of(user).channel_id):
        return dm_of(user)
    found = channel_named(name) or next((c for c in CHANNELS if c.channel_id == name), None)
    if found is None:
        raise web.HTTPBadRequest(text=f"no channel {name!r}")
    return found


def _channel(channel: Channel) -> dict[str, str]:
    return {"id": channel.channel_id, "name": channel.name, "label": channel.label}


def _mention(found: re.Match[str]) -> str:
    """`@OpsGate`, `@Sam`: a Slack mention of that user (other words left as they are)."""
    word = found.group(1).lower()
    if word == BOT.name.lower():
        return f"<@{BOT.user_id}>"
    known = next((p for p in PEOPLE if p.name.lower() == word), None)
    return f"<@{known.user_id}>" if known else found.group(0)


def _state_values(view: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A modal's `state.values` as Slack sends them, from the page's `{block_id: value}`: a text
    input's `value`, a select's or radio group's `selected_option`."""
    values: dict[str, Any] = {}
    for block in view.get("blocks") or []:
        element = block.get("element") if block.get("type") == "input" else None
        if not isinstance(element, Mapping):
            continue
        block_id = str(block.get("block_id") or "")
        action_id = str(element.get("action_id") or "")
        raw = given.get(block_id)
        kind = str(element.get("type") or "")
        if kind in ("static_select", "radio_buttons"):
            options = element.get("options") or []
            chosen = next((o for o in options if o.get("value") == raw), None)
            values[block_id] = {action_id: {"type": kind, "selected_option": chosen}}
        else:
            text = str(raw) if isinstance(raw, str) and raw != "" else None
            values[block_id] = {action_id: {"type": kind, "value": text}}
    return values
