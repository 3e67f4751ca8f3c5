"""Every Slack wire string OpsGate relies on, in one place: action ids, callback ids, block ids,
the decision block-id format, the card metadata, the shortcut and the slash command; and the
wire read back: a click's or a form's payload as the run service's values (`click_of`,
`submitted`, `clicker`), and what a Web API call can raise with its error code in Slack's
words (`SLACK_ERRORS`, `slack_error`).

Cards posted by an older release are still in channels with live buttons, and manifest.yml is
pasted into Slack once: none of these may change (tests/slack/test_wire_strings.py pins them).

Which arguments a clicked card showed: its decision buttons' `block_id` carries the digest.
The button value stays the opaque ledger id (docs/architecture.md, semantics 5); the digest
rides in the actions block's id, which Slack echoes with every click. An Approve or "Allow for"
click whose digest is not the call's current one came from a card drawn before an edit, and the
store refuses it (`ArgumentsChanged`) instead of counting it toward the edited call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, get_args

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from ..runs.clicks import Click
from ..runs.output import Thread
from ..runs.views import CardCall, CardRef
from ..store.models import CardLock

__all__ = [
    "ACTION_ALLOW",
    "ACTION_ALLOW_SHAPE",
    "ACTION_APPROVE",
    "ACTION_BREAK_GLASS",
    "ACTION_CANCEL",
    "ACTION_EDIT",
    "ACTION_FEEDBACK",
    "ACTION_FEEDBACK_REASON",
    "ACTION_FIELD",
    "ACTION_GLASS_REASON",
    "ACTION_REASON",
    "ACTION_REASON_CHOICE",
    "ACTION_REJECT",
    "ACTION_RERUN_PREVIEW",
    "ACTION_REVIEWED",
    "ACTION_REVOKE",
    "BLOCK_ACTIONS",
    "BLOCK_ALLOW_SHAPE",
    "BLOCK_FEEDBACK",
    "BLOCK_FEEDBACK_REASON",
    "BLOCK_GLASS_REASON",
    "BLOCK_REASON",
    "BLOCK_REASON_CHOICE",
    "BUTTON_VALUE_MAX",
    "CALLBACK_ALLOW",
    "CALLBACK_BREAK_GLASS",
    "CALLBACK_EDIT",
    "CALLBACK_FEEDBACK",
    "CALLBACK_REJECT",
    "CARD_EVENT",
    "COMMAND",
    "FEEDBACK_VALUES",
    "QUEUE_EVENT",
    "SHORTCUT",
    "SLACK_ERRORS",
    "card_metadata",
    "check_ledger_id",
    "click_of",
    "clicker",
    "decision_block_id",
    "feedback_block_id",
    "feedback_session",
    "find_marked_card",
    "find_marked_notice",
    "queue_metadata",
    "shown_digest",
    "shown_preview_digest",
    "slack_error",
    "submitted",
    "team_of",
    "thread_of",
    "trigger_of",
]


# -- the strings -----------------------------------------------------------------------------
# Approval cards (and the Home tab's copies of their buttons)
ACTION_APPROVE = "opsgate_approve"
ACTION_REJECT = "opsgate_reject"
ACTION_CANCEL = "opsgate_cancel"
ACTION_EDIT = "opsgate_edit"
ACTION_ALLOW = "opsgate_allow"
BLOCK_ACTIONS = "opsgate_decision"
"""The prefix of a card's actions block id: `opsgate_decision:<digest>[.<preview digest>]
[:<ledger id>]` (the preview digest on cards whose rule declares a preview)."""
ACTION_RERUN_PREVIEW = "opsgate_rerun_preview"
"""A card's "Re-run preview" button: run the deciding rule's preview again and redraw."""
ACTION_REVOKE = "opsgate_revoke"
"""An allowance's Revoke button (Home tab, `/opsgate allowances`)."""
# Change freezes: "Break glass" on a frozen card, its reason modal, "Mark reviewed" after
ACTION_BREAK_GLASS = "opsgate_break_glass"
ACTION_REVIEWED = "opsgate_mark_reviewed"
CALLBACK_BREAK_GLASS = "opsgate_break_glass_modal"
BLOCK_GLASS_REASON = "glass_reason"
ACTION_GLASS_REASON = "glass_reason_input"
# The reject modal
CALLBACK_REJECT = "opsgate_reject_modal"
BLOCK_REASON = "reason"
ACTION_REASON = "reason_input"
BLOCK_REASON_CHOICE = "reason_choice"
ACTION_REASON_CHOICE = "reason_choice_select"
# The edit modal
CALLBACK_EDIT = "opsgate_edit_modal"
ACTION_FIELD = "value"
"""The action id of every input of the edit modal; its block id is the argument's name."""
# The Allow dialog (the granter chooses the allowance's shape)
CALLBACK_ALLOW = "opsgate_allow_modal"
BLOCK_ALLOW_SHAPE = "allow_shape"
ACTION_ALLOW_SHAPE = "allow_shape_choice"
# Feedback on a final answer (a `context_actions` block with `feedback_buttons`)
ACTION_FEEDBACK = "opsgate_feedback"
BLOCK_FEEDBACK = "opsgate_feedback"
"""The prefix of the feedback block's id: `opsgate_feedback:<session id>`."""
FEEDBACK_VALUES = ("good", "bad")
"""The positive and the negative button's values."""
CALLBACK_FEEDBACK = "opsgate_feedback_modal"
"""The optional "what was wrong?" modal a "bad" click opens."""
BLOCK_FEEDBACK_REASON = "feedback_reason"
ACTION_FEEDBACK_REASON = "feedback_reason_input"
# manifest.yml
SHORTCUT = "opsgate_ask"
"""The message shortcut's callback id."""
COMMAND = "/opsgate"
"""The slash command."""
CARD_EVENT = "opsgate_card"
"""The metadata `event_type` of an approval card."""
QUEUE_EVENT = "opsgate_queue"
"""The metadata `event_type` of a channel's "queued" notice (its payload names the burst)."""
BUTTON_VALUE_MAX = 2000
"""Slack's longest button value; a ledger id is the whole value."""


# -- decision block ids ------------------------------------------------------------------------
_PREFIX = BLOCK_ACTIONS
_BOUND = re.compile(
    rf"^{_PREFIX}:([0-9a-f]{{1,64}})(?:\.([0-9a-f]{{1,64}}))?(?::[0-9A-Za-z_-]{{1,64}})?$"
)


def decision_block_id(
    digest: str, ledger_id: str | None = None, *, preview_digest: str | None = None
) -> str:
    """The block id of a card's buttons: the digest it shows (and its preview's), and on the
    Home tab (many cards in one view, block ids unique) the ledger id too."""
    shown = digest + (f".{preview_digest}" if preview_digest else "")
    return f"{_PREFIX}:{shown}" + (f":{ledger_id}" if ledger_id else "")


def shown_digest(block_id: object) -> str | None:
    """The digest a click's card showed; None for a card drawn without one."""
    found = _BOUND.match(block_id) if isinstance(block_id, str) else None
    return found.group(1) if found else None


def shown_preview_digest(block_id: object) -> str | None:
    """The preview digest a click's card showed; None for a card without a preview."""
    found = _BOUND.match(block_id) if isinstance(block_id, str) else None
    return found.group(2) if found else None


def feedback_block_id(session_id: str) -> str:
    """The feedback block's id: it names the session the answer belongs to."""
    return f"{BLOCK_FEEDBACK}:{session_id}"


_FEEDBACK = re.compile(rf"^{BLOCK_FEEDBACK}:([0-9A-Za-z_-]{{1,200}})$")


def feedback_session(block_id: object) -> str | None:
    """The session a feedback click is about; None for a block that is not ours."""
    found = _FEEDBACK.match(block_id) if isinstance(block_id, str) else None
    return found.group(1) if found else None


# -- card_marks ----------------------------------------------------------------------------------
# Cards marked with their ledger id (Slack message metadata), and finding them again; "queued"
# notices likewise, with their burst (`bot.slack.queue_notice`).
#
# A process killed while `chat.postMessage` for a card was on its way never stored where the card
# went: Slack may have posted it, with live buttons. Every card carries metadata naming its call,
# so the next try looks in the thread first (`conversations.replies`) and adopts the card it
# finds instead of posting a second one (docs/architecture.md, "The data path of one
# request", step 7).


_PAGE = 200
_MAX_PAGES = 50
"""A thread longer than this many pages is not searched further (10,000 replies)."""


def card_metadata(card: CardCall) -> dict[str, Any]:
    """The metadata posted with `card`: its call, and whether it was posted locked (the lock
    must survive an adoption: the arguments file may never have been attached)."""
    return {
        "event_type": CARD_EVENT,
        "event_payload": {"ledger_id": card.ledger_id, "locked": card.locked or ""},
    }


async def find_marked_card(
    client: AsyncWebClient, bot_id: str, channel: str, thread_ts: str, ledger_id: str
) -> CardRef | None:
    """The first message in the thread posted by this bot (`bot_id`) whose metadata names
    `ledger_id`. Raises slack_sdk/aiohttp errors (the caller treats them as "not found")."""
    pages = functools.partial(client.conversations_replies, channel=channel, ts=thread_ts)
    async for message in _marked_messages(pages):
        if (found := _card_of(message, bot_id, ledger_id)) is not None:
            return CardRef(channel, found[0], found[1])
    return None


async def _marked_messages(pages: Callable[..., Awaitable[Any]]) -> AsyncIterator[Any]:
    """Every message of a listing (`conversations.replies` or `.history`, its arguments bound
    in `pages`), with metadata, page by page, up to `_MAX_PAGES`."""
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        response = await pages(include_all_metadata=True, limit=_PAGE, cursor=cursor)
        for message in response.get("messages") or []:
            yield message
        cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
        if not (cursor and response.get("has_more")):
            return


def _card_of(message: Any, bot_id: str, ledger_id: str) -> tuple[str, CardLock | None] | None:
    """(ts, lock) when `message` is this bot's card for `ledger_id`."""
    payload = _marked(message, bot_id, CARD_EVENT)
    if payload.get("ledger_id") != ledger_id:
        return None
    ts = message.get("ts")
    if not isinstance(ts, str) or not ts:
        return None
    locked = payload.get("locked")
    lock: CardLock | None = None
    if locked in get_args(CardLock):
        lock = locked
    elif locked:  # a lock this version does not know: stay locked rather than approvable
        lock = "arguments_not_attached"
    return ts, lock


def queue_metadata(burst: str) -> dict[str, Any]:
    """The metadata posted with a channel's "queued" notice: the burst it counts."""
    return {"event_type": QUEUE_EVENT, "event_payload": {"burst": burst}}


async def find_marked_notice(
    client: AsyncWebClient, bot_id: str, channel: str, burst: str, *, oldest: float
) -> str | None:
    """The ts of this bot's "queued" notice of `burst` in the channel, posted at `oldest` (a
    Unix time) or later, or None. Raises slack_sdk/aiohttp errors."""
    pages = functools.partial(client.conversations_history, channel=channel, oldest=f"{oldest:.6f}")
    async for message in _marked_messages(pages):
        if _marked(message, bot_id, QUEUE_EVENT).get("burst") == burst and message.get("ts"):
            return str(message["ts"])
    return None


def _marked(message: Any, bot_id: str, event_type: str) -> dict[str, Any]:
    """The metadata payload of `message` when this bot (`bot_id`) posted it marked as
    `event_type`; else empty."""
    if not isinstance(message, dict) or message.get("bot_id") != bot_id:
        return {}
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != event_type:
        return {}
    payload = metadata.get("event_payload")
    return payload if isinstance(payload, dict) else {}


def check_ledger_id(ledger_id: str) -> None:
    """Refuse a ledger id no button value or `private_metadata` can carry."""
    if not ledger_id or len(ledger_id) > BUTTON_VALUE_MAX:
        raise ValueError(f"ledger id must be 1..{BUTTON_VALUE_MAX} characters, got {ledger_id!r}")


# -- reading Slack's interaction payloads ------------------------------------------------------
# Clicks and form submissions as the run service's values: a `Click`, the clicker, where to
# answer them.
#
# The actor's workspace is the clicker's own (`user.team_id`), never Bolt's `context.team_id`
# (the app's installation): in a Slack Connect channel a guest of another organisation clicks
# the same card, and must not pass for a member of the session's workspace. A click that hides
# its workspace reads as None, which the one gate refuses (`bot.approvals`).


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


# -- what a Web API call can raise -------------------------------------------------------------
# What a Web API call can raise, and its name in Slack's words: shared by the output and the
# timeline, which must not import each other.


SLACK_ERRORS = (SlackClientError, aiohttp.ClientError, TimeoutError)
"""What a Web API call can raise once slack_sdk's retries are spent."""


def slack_error(exc: BaseException) -> str:
    """The Slack error code (e.g. "not_in_channel"), or the exception for transport errors."""
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error"))
    return f"{type(exc).__name__}: {exc}"
