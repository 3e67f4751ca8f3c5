"""Requests as Slack sends them to the app in HTTP mode: signed bodies and payloads shaped like
the fixtures in tests/fixtures/slack/ (see SOURCE.md there for provenance and wire format).

Builders start from a fixture and change only the values a test cares about, so every other
field stays exactly as Slack (via bolt-python's recorded payloads) sends it.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import itertools
import json
import re
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "FIXTURES",
    "app_mention",
    "block_actions",
    "event_body",
    "interaction_body",
    "load_fixture",
    "message",
    "sign",
    "slash_command",
    "view_submission",
]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slack"

_MENTION = re.compile(r"<@([UW][A-Z0-9]+)>")
_action_numbers = itertools.count(1)


def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The X-Slack-Request-Timestamp and X-Slack-Signature (v0) headers for `body`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


def load_fixture(name: str) -> dict[str, Any]:
    """A fresh copy of tests/fixtures/slack/<name>(.json)."""
    path = FIXTURES / (name if name.endswith(".json") else f"{name}.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"fixture {name!r} is not a JSON object")
    return data


def event_body(fixture_or_dict: str | Mapping[str, Any], **overrides: Any) -> bytes:
    """An Events API body (JSON bytes). `event=` overrides are merged into the inner event."""
    body = (
        load_fixture(fixture_or_dict)
        if isinstance(fixture_or_dict, str)
        else copy.deepcopy(dict(fixture_or_dict))
    )
    event_overrides = overrides.pop("event", None)
    body.update(overrides)
    if event_overrides:
        body["event"] = {**body.get("event", {}), **event_overrides}
    return json.dumps(body).encode()


def interaction_body(payload: Mapping[str, Any]) -> bytes:
    """An interactivity body: `payload=<urlencoded JSON>` (form-encoded, as Slack posts it)."""
    return f"payload={urllib.parse.quote(json.dumps(payload))}".encode()


def app_mention(
    text: str,
    *,
    channel: str,
    user: str,
    ts: str,
    event_id: str,
    thread_ts: str | None = None,
    team: str = "T0TEST",
    bot_user: str = "UBOT",
) -> dict[str, Any]:
    """An `event_callback` wrapping `app_mention`, shaped like event_callback_app_mention.json.

    `text` should contain the mention, e.g. "<@UBOT> deploy the thing".
    """
    body = load_fixture("event_callback_app_mention.json")
    event = body["event"]
    event.update(
        text=text,
        user=user,
        ts=ts,
        event_ts=ts,
        channel=channel,
        team=team,
        blocks=[_rich_text(text)],
    )
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    _envelope(body, event_id=event_id, ts=ts, team=team, bot_user=bot_user)
    return body


def message(
    text: str,
    *,
    channel: str,
    user: str,
    ts: str,
    event_id: str,
    thread_ts: str | None = None,
    parent_user_id: str | None = None,
    channel_type: str | None = None,
    bot_id: str | None = None,
    team: str = "T0TEST",
    bot_user: str = "UBOT",
    **event_fields: Any,
) -> dict[str, Any]:
    """An `event_callback` wrapping a `message` event, shaped like the message_* fixtures.

    - `bot_id` set: a bot-authored message (message_bot_message.json);
    - `thread_ts` set: a thread reply (message_channel_thread_reply.json, or
      message_im_in_thread.json in a DM);
    - otherwise a top-level DM (message_im_docs_example.json) or channel message (the thread
      reply fixture without its thread fields).
    `channel_type` defaults from the channel id (D → im, G → group, else channel).
    `event_fields` are set on the event last (e.g. `subtype="channel_join"`).
    """
    kind = channel_type or _channel_type(channel)
    if bot_id is not None:
        body = load_fixture("message_bot_message.json")
        body["event"]["bot_id"] = bot_id
        body["event"]["bot_profile"].update(id=bot_id, team_id=team)
    elif thread_ts is not None:
        name = "message_im_in_thread.json" if kind == "im" else "message_channel_thread_reply.json"
        body = load_fixture(name)
        body["event"].update(thread_ts=thread_ts, parent_user_id=parent_user_id or user)
    elif kind == "im":
        body = load_fixture("message_im_docs_example.json")
    else:
        body = load_fixture("message_channel_thread_reply.json")
        del body["event"]["thread_ts"], body["event"]["parent_user_id"]
    event = body["event"]
    event.update(
        text=text, user=user, ts=ts, event_ts=ts, channel=channel, channel_type=kind, team=team
    )
    if "user_team" in event:
        event.update(user_team=team, source_team=team)
    event.update(event_fields)
    body.pop("enterprise_id", None)
    _envelope(body, event_id=event_id, ts=ts, team=team, bot_user=bot_user)
    return body


def block_actions(
    action_id: str,
    value: str,
    *,
    user: str,
    channel: str,
    message_ts: str,
    team: str = "T0TEST",
    block_id: str = "opsgate_decision",
    blocks: list[dict[str, Any]] | None = None,
    message_text: str | None = None,
    trigger_id: str | None = None,
    response_url: str | None = None,
    bot_user: str = "UBOT",
    bot_id: str = "BBOT",
) -> dict[str, Any]:
    """A `block_actions` payload for a button click, shaped like block_actions_button_click.json.

    The clicked message is the bot's (`bot_user`, `bot_id`, as the stand-in's auth.test says).
    `blocks` are the clicked message's blocks (the fixture's when None); `response_url` keeps
    the fixture's (unreachable) URL unless given, e.g. `standin.response_url()`.
    """
    body = load_fixture("block_actions_button_click.json")
    number = next(_action_numbers)
    body["user"]["id"] = user
    body["team"]["id"] = team
    body["channel"]["id"] = channel
    body["container"].update(message_ts=message_ts, channel_id=channel)
    body["message"].update(ts=message_ts, team=team, user=bot_user, bot_id=bot_id)
    if blocks is not None:
        body["message"]["blocks"] = blocks
    if message_text is not None:
        body["message"]["text"] = message_text
    if trigger_id is not None:
        body["trigger_id"] = trigger_id
    else:
        body["trigger_id"] = f"{number}.{team}.opsgate"
    if response_url is not None:
        body["response_url"] = response_url
    action = body["actions"][0]
    action.update(
        action_id=action_id,
        block_id=block_id,
        value=value,
        action_ts=f"{1_700_000_000 + number}.000000",
    )
    action["text"] = {"type": "plain_text", "text": _button_text(blocks, action_id) or action_id}
    return body


def view_submission(
    callback_id: str,
    private_metadata: str,
    values: Mapping[str, Mapping[str, Any]],
    *,
    user: str,
    team: str = "T0TEST",
    blocks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A `view_submission` payload shaped like view_submission_modal.json.

    `values` maps block_id → action_id → the typed text (None for empty), or a full state value
    dict such as `{"type": "plain_text_input", "value": "..."}`.
    """
    body = load_fixture("view_submission_modal.json")
    body["team"]["id"] = team
    body["user"].update(id=user, team_id=team)
    view = body["view"]
    view.update(callback_id=callback_id, private_metadata=private_metadata, team_id=team)
    if blocks is not None:
        view["blocks"] = blocks
    view["state"]["values"] = {
        block_id: {
            action_id: (
                dict(entry)
                if isinstance(entry, Mapping)
                else {"type": "plain_text_input", "value": entry}
            )
            for action_id, entry in actions.items()
        }
        for block_id, actions in values.items()
    }
    return body


def slash_command(
    text: str,
    *,
    user: str,
    channel: str,
    team: str = "T0TEST",
    command: str = "/opsgate",
    response_url: str | None = None,
    trigger_id: str | None = None,
    channel_name: str = "ops",
    user_name: str = "someone",
) -> bytes:
    """A slash-command body: plain form fields, urlencoded, as Slack posts it (the field names
    and order of the form body in signature_test_vector.json, with this command's values)."""
    vector = load_fixture("signature_test_vector.json")
    fields = dict(urllib.parse.parse_qsl(vector["raw_body"], keep_blank_values=True))
    number = next(_action_numbers)
    fields.update(
        team_id=team,
        channel_id=channel,
        channel_name=channel_name,
        user_id=user,
        user_name=user_name,
        command=command,
        text=text,
        trigger_id=trigger_id or f"{number}.{team}.opsgate",
    )
    if response_url is not None:
        fields["response_url"] = response_url
    return urllib.parse.urlencode(fields).encode()


# -- machinery ---------------------------------------------------------------------------------


def _envelope(body: dict[str, Any], *, event_id: str, ts: str, team: str, bot_user: str) -> None:
    body.update(team_id=team, event_id=event_id, event_time=int(float(ts)))
    body["authorizations"] = [
        {
            "enterprise_id": None,
            "team_id": team,
            "user_id": bot_user,
            "is_bot": True,
            "is_enterprise_install": False,
        }
    ]


def _channel_type(channel: str) -> str:
    if channel.startswith("D"):
        return "im"
    if channel.startswith("G"):
        return "group"
    return "channel"


def _rich_text(text: str) -> dict[str, Any]:
    """The rich_text block Slack attaches to a typed message, mentions as user elements."""
    elements: list[dict[str, Any]] = []
    position = 0
    for match in _MENTION.finditer(text):
        if match.start() > position:
            elements.append({"type": "text", "text": text[position : match.start()]})
        elements.append({"type": "user", "user_id": match.group(1)})
        position = match.end()
    if position < len(text):
        elements.append({"type": "text", "text": text[position:]})
    return {
        "type": "rich_text",
        "block_id": "BCCO",
        "elements": [{"type": "rich_text_section", "elements": elements}],
    }


def _button_text(blocks: list[dict[str, Any]] | None, action_id: str) -> str | None:
    for block in blocks or []:
        for element in block.get("elements", []) if isinstance(block, dict) else []:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                text = element.get("text", {})
                return str(text.get("text")) if isinstance(text, dict) else None
    return None
