"""The ending of a streamed answer, kept in the outbox until Slack shows it.

Streaming text in flight stays in memory; but once an answer has all its text, what Slack still
lacks of it (the current message's whole text, its closing blocks, the attached file) is stored
as an outbox row *before* the stream is stopped. When the stop is made with the whole text the
row is deleted. When the process dies first (a kill, a restart), or the stream was cut off (an
append or the stop failed for good), the outbox's sender finishes the answer from the row: it
redraws the streamed message with `chat.update` (or posts it when it never started). The answer
then shows once, whole, within the five-message cap (the ending is at most one message and the
file; `bot.slack.streaming` counted the messages before it). An ending whose message was never
started (an answer posted whole) carries a `mark`, posted in the message's metadata: a sender
finishing it after the process that kept it died first looks for that message in the thread
and redraws it, so the answer is not posted twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

__all__ = [
    "ANSWER_ENDING",
    "ANSWER_EVENT",
    "SECTION_TEXT_MAX",
    "AnswerKeeper",
    "Ending",
    "finish_answer",
    "sections",
    "split_point",
]

logger = logging.getLogger("opsgate.slack.endings")

ANSWER_EVENT = "opsgate_answer"
"""The metadata event type of an answer posted whole (its payload: the ending's `mark`)."""
ANSWER_ENDING = "opsgate.answer_ending"
"""The outbox method of an answer's ending (not a Web API method: `finish_answer` makes it)."""
SECTION_TEXT_MAX = 3000
"""Longest text of one section block (a message given closing blocks is drawn in them)."""
FILE_NAME = "answer.md"
FILE_TITLE = "The whole answer"
_REPOST = {"message_not_found", "cant_update_message", "edit_window_closed"}
"""`chat.update` errors after which the ending is posted as a new message instead."""


@dataclass(frozen=True, slots=True)
class Ending:
    """What Slack still lacks of a finished answer. `ts`: the message being written (streamed
    or posted), None when its text never reached Slack; `text`: that message's whole text
    (escaped mrkdwn); `blocks`: closing blocks under it; `file`: the whole answer, attached."""

    channel: str
    thread_ts: str
    ts: str | None
    text: str
    blocks: tuple[dict[str, Any], ...] = ()
    file: str | None = None
    mark: str | None = None
    """Posted in the metadata of the message made for it when `ts` is None (see the module)."""

    def params(self) -> dict[str, Any]:
        return {
            "mark": self.mark,
            "channel": self.channel,
            "thread_ts": self.thread_ts,
            "ts": self.ts,
            "text": self.text,
            "blocks": list(self.blocks),
            "file": self.file,
        }


class AnswerKeeper(Protocol):
    """Where a `ThreadReply` keeps its ending (`bot.slack.outbox.SlackOutbox`)."""

    async def keep(self, ending: Ending) -> str | None:
        """Store `ending`, held by this process; its row id, or None when it was not stored
        (the reply then finishes best effort, as without a keeper)."""
        ...

    async def kept(self, row_id: str) -> None:
        """The reply made the ending itself: the row is done."""
        ...

    async def release(self, row_id: str) -> None:
        """The reply could not make it: the sender finishes the answer from the row."""
        ...


def split_point(text: str, limit: int) -> int:
    """Where to end one message of a long answer: a line break or space if there is one in
    the second half, and never inside an escaped `&amp;`/`&lt;`/`&gt;`."""
    for sep in ("\n", " "):
        cut = text.rfind(sep, limit // 2, limit)
        if cut != -1:
            return cut
    amp = text.rfind("&", limit - 5, limit)
    return amp if amp != -1 and ";" not in text[amp:limit] else limit


def sections(text: str) -> list[dict[str, Any]]:
    """Escaped mrkdwn as section blocks of at most `SECTION_TEXT_MAX` characters each."""
    out: list[dict[str, Any]] = []
    while text:
        cut = len(text) if len(text) <= SECTION_TEXT_MAX else split_point(text, SECTION_TEXT_MAX)
        out.append({"type": "section", "text": {"type": "mrkdwn", "text": text[:cut]}})
        text = text[cut:].lstrip("\n")
    return out


async def finish_answer(
    client: AsyncWebClient, params: Mapping[str, Any], *, retried: bool = False
) -> None:
    """The sender's half: show the ending (redraw the message, or post it), then attach the
    file. Redrawing is idempotent, so a row sent twice (a lease that lapsed) shows once; a
    message to post is looked for first when it may have been posted (`retried`)."""
    channel, thread_ts = str(params["channel"]), str(params["thread_ts"])
    text = str(params.get("text") or "")
    blocks = list(params.get("blocks") or [])
    drawn = sections(text) + blocks if blocks else None
    ts = params.get("ts")
    mark = str(params.get("mark") or "") or None
    if not ts and mark is not None and retried:
        try:
            ts = await _posted(client, channel, thread_ts, mark)
        except SlackApiError as exc:  # not found either way: posting beats losing the answer
            logger.warning("could not look for a posted answer: %s", exc.response.get("error"))
    if text or blocks:
        try:
            await _show(client, channel, thread_ts, ts, text, drawn, mark)
        except SlackApiError as exc:
            if exc.response.get("error") != "invalid_blocks" or not text:
                raise
            await _show(client, channel, thread_ts, ts, text, None, mark)  # the text, at least
    if (file := params.get("file")) is not None:
        await client.files_upload_v2(
            channel=channel,
            thread_ts=thread_ts,
            filename=FILE_NAME,
            title=FILE_TITLE,
            content=str(file),
        )


async def _show(
    client: AsyncWebClient,
    channel: str,
    thread_ts: str,
    ts: Any,
    text: str,
    blocks: list[dict[str, Any]] | None,
    mark: str | None = None,
) -> None:
    """Redraw message `ts` (posted anew if it is gone or cannot be edited), or post it."""
    if ts:
        try:
            await client.chat_update(channel=channel, ts=str(ts), text=text, blocks=blocks)
            return
        except SlackApiError as exc:
            if exc.response.get("error") not in _REPOST:
                raise
    metadata = None
    if mark is not None:
        metadata = {"event_type": ANSWER_EVENT, "event_payload": {"mark": mark}}
    await client.chat_postMessage(
        channel=channel, thread_ts=thread_ts, text=text, blocks=blocks, metadata=metadata
    )


async def _posted(client: AsyncWebClient, channel: str, thread_ts: str, mark: str) -> str | None:
    """The ts of the message of the thread posted for the ending marked `mark`, if any."""
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        response = await client.conversations_replies(
            channel=channel, ts=thread_ts, include_all_metadata=True, limit=200, cursor=cursor
        )
        for message in response.get("messages") or []:
            metadata = message.get("metadata") if isinstance(message, dict) else None
            if (
                isinstance(metadata, dict)
                and metadata.get("event_type") == ANSWER_EVENT
                and (metadata.get("event_payload") or {}).get("mark") == mark
            ):
                return str(message.get("ts") or "") or None
        cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
        if not (cursor and response.get("has_more")):
            return None
    return None


_MAX_PAGES = 10
"""Pages of a thread looked through for a posted ending (200 messages each)."""
