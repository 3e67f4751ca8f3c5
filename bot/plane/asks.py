"""An outside request as the API takes it: the body checked field by field (a 400 names the
field), then the client's limits (a 403 names what is outside them)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from bot.errors import BadRequest

from ..policy import PlaneClient, PlanePolicy

__all__ = ["MAX_BODY", "Ask", "Outside", "argv_of", "parse_ask", "place"]

MAX_BODY = 256 * 1024
"""Bodies above this many bytes are refused (413)."""

_TEXT_MAX = 2_000


@dataclass(frozen=True, slots=True)
class Ask:
    """A checked request body."""

    tool: str
    arguments: dict[str, Any]
    channel: str | None = None
    reason: str | None = None
    requester: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Outside:
    """Where a client's ask goes and whom it names: refused (403) when outside its lists."""

    channel: str
    requester: str | None


def _text(body: dict[str, Any], name: str, limit: int = _TEXT_MAX) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(name, "must be a non-empty string")
    if len(value) > limit:
        raise BadRequest(name, f"longer than {limit} characters")
    return value


def parse_ask(raw: bytes) -> Ask:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("body", "not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("body", "not a JSON object")
    unknown = sorted(set(body) - set(Ask.__slots__))
    if unknown:
        raise BadRequest(unknown[0], "unknown field")
    tool = _text(body, "tool", 200)
    if tool is None:
        raise BadRequest("tool", "missing")
    arguments = body.get("arguments")
    if not isinstance(arguments, dict):
        raise BadRequest("arguments", "must be a JSON object")
    if tool == "run_command":
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise BadRequest("arguments.command", "must be a non-empty string")
        try:
            shlex.split(command)
        except ValueError as exc:
            raise BadRequest("arguments.command", f"not a command line: {exc}") from None
    return Ask(
        tool=tool,
        arguments=arguments,
        channel=_text(body, "channel", 40),
        reason=_text(body, "reason"),
        requester=_text(body, "requester", 40),
        idempotency_key=_text(body, "idempotency_key", 200),
    )


def place(plane: PlanePolicy, client: PlaneClient, ask: Ask) -> Outside | str:
    """Where the ask goes; else what is outside the client's lists (the 403's reason), or
    raises `BadRequest` when no channel is named anywhere."""
    if ask.tool not in client.tools:
        return f"tool {ask.tool!r} is not one this client may ask for"
    channel = ask.channel or (client.channels[0] if client.channels else plane.channel)
    if channel is None:
        raise BadRequest("channel", "missing (the client and [plane] name none)")
    allowed = client.channels or ((plane.channel,) if plane.channel else ())
    if channel not in allowed:
        return f"channel {channel!r} is not one this client's cards may go to"
    return Outside(channel, ask.requester or client.requester)


def argv_of(tool: str, arguments: dict[str, Any]) -> tuple[str, ...] | None:
    """run_command's argv (the command split as a shell would, without running one)."""
    if tool != "run_command":
        return None
    return tuple(shlex.split(str(arguments.get("command", ""))))
