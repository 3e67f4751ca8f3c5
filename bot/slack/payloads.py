"""Reading Slack's interaction payloads (clicks, form submissions) into the run service's
values: a `Click`, the clicker, where to answer them.

The actor's workspace is the clicker's own (`user.team_id`), never Bolt's `context.team_id`
(the app's installation): in a Slack Connect channel a guest of another organisation clicks
the same card, and must not pass for a member of the session's workspace. A click that hides
its workspace reads as None, which the one gate refuses (`bot.approvals`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..runs.clicks import Click
from ..runs.output import Thread
from .ids import shown_digest, shown_preview_digest

__all__ = ["click_of", "clicker", "submitted", "team_of", "thread_of", "trigger_of"]


def click_of(body: Mapping[str, Any]) -> Click:
    """A button click (`block_actions`): the button's value names the call, its block id the
    digests the card showed, the message the card's thread (none on the Home tab)."""
    user = body.get("user") or {}
    team = user.get("team_id") or (body.get("team") or {}).get("id")
    container = body.get("container") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
    if container.get("type") == "view":  # the Home tab: no channel, no thread
        channel = None
    message = body.get("message") or {}
    thread_ts = message.get("thread_ts") or message.get("ts")
    thread = Thread(str(team or ""), str(channel), str(thread_ts)) if channel else None
    action = body["actions"][0]
    return Click(
        ledger_id=str(action.get("value") or ""),
        user=str(user.get("id")),
        team=str(team) if team else None,
        thread=thread,
        digest=shown_digest(action.get("block_id")),
        preview_digest=shown_preview_digest(action.get("block_id")),
    )


def submitted(body: Mapping[str, Any], ledger_id: str, digest: str | None = None) -> Click:
    """A form's submission (`view_submission`), on the call its metadata names: the submitter
    and their workspace; no thread (a modal has none)."""
    user = body.get("user") or {}
    team = user.get("team_id")
    return Click(ledger_id, str(user.get("id")), str(team) if team else None, digest=digest)


def trigger_of(body: Mapping[str, Any]) -> str:
    """The click's `trigger_id`: a form opens with it, within 3 s."""
    return str(body.get("trigger_id") or "")


def clicker(body: Mapping[str, Any]) -> tuple[str, str | None]:
    """Who clicked ("" when the payload does not say) and their workspace."""
    user = body.get("user") or {}
    team = user.get("team_id") or (body.get("team") or {}).get("id")
    return str(user.get("id") or ""), str(team) if team else None


def team_of(body: Mapping[str, Any]) -> str:
    """The workspace a request came from, for its dedupe key and where to answer."""
    team = body.get("team_id") or (body.get("team") or {}).get("id")
    return str(team or (body.get("user") or {}).get("team_id") or "")


def thread_of(body: Mapping[str, Any]) -> Thread | None:
    """The clicked message's thread; None when the request came from no message (a modal, the
    Home tab)."""
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
        "channel_id"
    )
    message = body.get("message") or {}
    ts = message.get("thread_ts") or message.get("ts")
    return Thread(team_of(body), str(channel), str(ts)) if channel and ts else None


def ledger_id_of(body: Mapping[str, Any]) -> str | None:
    """The call a click or a submitted form was on: the button's value, else the modal's
    metadata; None when neither says."""
    actions = body.get("actions") or []
    ledger_id = (
        actions[0].get("value") if actions and isinstance(actions[0], Mapping) else None
    ) or ((body.get("view") or {}).get("private_metadata"))
    return str(ledger_id) if ledger_id else None
