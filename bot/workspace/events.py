"""What the workspace sends the bot, as Slack sends it in HTTP mode: events, interactions and
slash commands, signed with the signing secret and posted to the bot's own `/slack/events`.

The payloads have the shapes of Slack's (the Events API envelope with `authorizations`, the
`block_actions` and `view_submission` bodies, the slash command's form fields), so the bot's
signature check, intake, deduplication and listeners all run as they do for Slack.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import secrets
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from .state import BOT, TEAM, channel_by_id, person

__all__ = [
    "BotReply",
    "EventSender",
    "app_home_opened",
    "block_actions",
    "envelope",
    "home_actions",
    "message_event",
    "sign",
    "slash_command",
    "view_submission",
]


def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Slack's request signature (v0): HMAC-SHA256 over `v0:<timestamp>:<body>`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


@dataclass(frozen=True)
class BotReply:
    """The bot's HTTP answer to one request: its status and its body (an ack's payload)."""

    status: int
    body: dict[str, Any]


class EventSender:
    """Posts signed requests to the bot's `/slack/events` at `url`."""

    def __init__(self, url: str, secret: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self._secret = secret
        self._session = session
        self._numbers = itertools.count(1)

    def trigger(self) -> str:
        """A new `trigger_id` (`views.open` takes it back within the request)."""
        return f"{int(time.time())}.{next(self._numbers)}.{secrets.token_hex(8)}"

    async def _post(self, body: bytes, content_type: str) -> BotReply:
        headers = {"Content-Type": content_type, **sign(self._secret, body)}
        async with self._session.post(self.url, data=body, headers=headers) as response:
            text = await response.text()
            try:
                parsed = json.loads(text) if text.strip() else {}
            except ValueError:
                parsed = {"text": text}
            return BotReply(response.status, parsed if isinstance(parsed, dict) else {})

    async def event(self, event: Mapping[str, Any]) -> BotReply:
        """An Events API `event_callback` wrapping `event`."""
        return await self._post(json.dumps(envelope(event)).encode(), "application/json")

    async def interaction(self, payload: Mapping[str, Any]) -> BotReply:
        """An interactivity request: `payload=<urlencoded JSON>`."""
        body = f"payload={urllib.parse.quote(json.dumps(payload))}".encode()
        return await self._post(body, "application/x-www-form-urlencoded")

    async def command(self, fields: Mapping[str, str]) -> BotReply:
        """A slash command: its form fields."""
        body = urllib.parse.urlencode(dict(fields)).encode()
        return await self._post(body, "application/x-www-form-urlencoded")


# -- payloads ----------------------------------------------------------------------------------


def envelope(event: Mapping[str, Any]) -> dict[str, Any]:
    """The Events API `event_callback` body that carries `event`."""
    return {
        "token": "local",
        "team_id": TEAM,
        "api_app_id": BOT.app_id,
        "event": dict(event),
        "type": "event_callback",
        "event_id": f"Ev{secrets.token_hex(6).upper()}",
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": TEAM,
                "user_id": BOT.user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{secrets.token_hex(8)}",
    }


def message_event(
    message: Mapping[str, Any], channel: str, *, mention: bool = False
) -> dict[str, Any]:
    """A `message` event (or `app_mention`) for a message the page posted."""
    found = channel_by_id(channel)
    event: dict[str, Any] = {
        "type": "app_mention" if mention else "message",
        "text": message.get("text", ""),
        "ts": message["ts"],
        "team": TEAM,
        "channel": channel,
        "event_ts": message["ts"],
        "blocks": message.get("blocks") or [],
    }
    for key in ("user", "bot_id", "bot_profile", "subtype", "attachments", "thread_ts"):
        if key in message:
            event[key] = message[key]
    if message.get("user") and not message.get("bot_id"):  # a person of this workspace
        event.update(user_team=TEAM, source_team=TEAM)
    if "thread_ts" in message and message.get("user"):
        event["parent_user_id"] = message.get("parent_user_id", message["user"])
    if not mention:
        event["channel_type"] = found.kind if found else "channel"
    return event


def block_actions(
    user: str,
    channel: str,
    message: Mapping[str, Any],
    action: Mapping[str, Any],
    *,
    trigger_id: str,
    response_url: str,
) -> dict[str, Any]:
    """A `block_actions` payload for a click on a button of `message`."""
    ephemeral = "ephemeral_for" in message
    shown = {k: v for k, v in message.items() if k not in ("ephemeral_for", "streaming")}
    return {
        "type": "block_actions",
        "user": _user(user),
        "api_app_id": BOT.app_id,
        "token": "local",
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": channel,
            "is_ephemeral": ephemeral,
            **({"thread_ts": message["thread_ts"]} if "thread_ts" in message else {}),
        },
        "trigger_id": trigger_id,
        "team": {"id": TEAM, "domain": "local"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": _channel_name(channel)},
        **({} if ephemeral else {"message": shown}),
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [{**action, "action_ts": f"{time.time():.6f}"}],
    }


def home_actions(
    user: str, view: Mapping[str, Any], action: Mapping[str, Any], trigger_id: str
) -> dict[str, Any]:
    """A `block_actions` payload for a click on a button of a view (the Home tab, a modal)."""
    return {
        "type": "block_actions",
        "user": _user(user),
        "api_app_id": BOT.app_id,
        "token": "local",
        "container": {"type": "view", "view_id": view.get("id")},
        "trigger_id": trigger_id,
        "team": {"id": TEAM, "domain": "local"},
        "enterprise": None,
        "is_enterprise_install": False,
        "view": dict(view),
        "actions": [{**action, "action_ts": f"{time.time():.6f}"}],
    }


def view_submission(
    user: str, view: Mapping[str, Any], values: Mapping[str, Any], trigger_id: str
) -> dict[str, Any]:
    """A `view_submission` payload: the view with its inputs' `state.values`."""
    submitted = {**view, "state": {"values": dict(values)}}
    submitted.setdefault("previous_view_id", None)
    submitted.setdefault("root_view_id", view.get("id"))
    return {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "local"},
        "user": {**_user(user), "team_id": TEAM},
        "api_app_id": BOT.app_id,
        "token": "local",
        "trigger_id": trigger_id,
        "view": submitted,
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def slash_command(
    user: str, channel: str, text: str, *, trigger_id: str, response_url: str
) -> dict[str, str]:
    """The form fields of `/opsgate <text>` typed in `channel`."""
    return {
        "token": "local",
        "team_id": TEAM,
        "team_domain": "local",
        "channel_id": channel,
        "channel_name": _channel_name(channel),
        "user_id": user,
        "user_name": _user(user)["username"],
        "command": "/opsgate",
        "text": text,
        "api_app_id": BOT.app_id,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id,
    }


def app_home_opened(user: str) -> dict[str, Any]:
    return {
        "type": "app_home_opened",
        "user": user,
        "channel": "D" + user.removeprefix("U"),
        "tab": "home",
        "event_ts": f"{time.time():.6f}",
    }


def _user(user: str) -> dict[str, Any]:
    found = person(user)
    name = found.name.lower() if found else user.lower()
    return {"id": user, "username": name, "name": name, "team_id": TEAM}


def _channel_name(channel: str) -> str:
    found = channel_by_id(channel)
    return "directmessage" if found is None or found.kind == "im" else found.name
