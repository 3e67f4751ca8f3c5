"""Streaming an answer into a Slack thread.

Slack's `chat.startStream`/`appendStream`/`stopStream` (slack_sdk's `chat_stream`) is used where the
workspace offers it. Where it doesn't, the answer is posted once and then edited. Either way text
is sent in batches (every `FLUSH_CHARS` characters, or after `FLUSH_SECONDS` with text waiting;
while the method's workspace-wide bucket is being spent, a storm, only the latter: a fast
writer's pieces are then bigger, not more), so an 18,000-character answer costs about a dozen
Web API calls, not hundreds; and an answer is
posted as at most `MAX_MESSAGES` messages, the whole of it attached as a file when it is longer.
A stream cut off (an append or a stop failing for good) is taken over by `chat.update` of its
own message. With a `keeper` (the outbox), what Slack still lacks when the answer is closed is
stored before the stream is stopped, and finished from there if the stop does not happen
(`bot.slack.endings`).

Streams spend `chat.startStream` and `chat.stopStream`, Tier 2: 20 a minute for the whole
workspace, where `chat.postMessage` has about one a second in each channel. So an answer streams
only when a stream slot is free within `START_WITHIN` of its first text (`stream_slot`, the
pacer's `claim_in_time`: across replicas, taken from their shared bucket), and each further
message of a long answer, a stream of its own, asks again; otherwise it is posted instead, in
whole messages (no edits either: those are `chat.update`, Tier 3, workspace-wide too), the last
one with its closing blocks when the answer is done. An answer complete before a stream could
start is thus one post.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from .endings import FILE_NAME, FILE_TITLE, AnswerKeeper, Ending, finish_answer, split_point
from .endings import sections as _sections
from .ids import SLACK_ERRORS, slack_error
from .mrkdwn import LinkGuard, escape_mrkdwn

__all__ = [
    "ThreadReply",
]


logger = logging.getLogger("opsgate.stream")

_STREAM_UNAVAILABLE = {
    "unknown_method",
    "not_allowed_token_type",
    "missing_scope",
    "method_deprecated",
    "feature_not_enabled",
    "not_allowed",
    "team_not_enabled",
    "not_authed",
    "invalid_arguments",
}
MAX_MESSAGE = 3500
"""Longest posted (post-and-edit) message; a longer answer continues in a new one."""
MAX_STREAMED = 12_000
"""Longest streamed message (Slack takes at most 12,000 characters of markdown per call)."""
MAX_MESSAGES = 5
"""Messages one answer may take; the rest is in the attached file."""
FLUSH_CHARS = 2_000
FLUSH_SECONDS = 1.0
BUSY_FACTOR = 4
"""How much bigger (and rarer) the pieces are while the Web API method's bucket is short."""
MORE_IN_FILE = "\n\n_… the answer goes on in the attached file._"
START_WITHIN = 1.0
"""Seconds an answer may wait for a stream slot; past that it is posted instead."""
FIRST_HOLD = 0.5
"""Seconds an answer's first text waits for the rest while streams are being spent (a storm):
one complete by then is posted whole, one `chat.postMessage` in its channel's own bucket where
a stream costs a start and a stop of the workspace's Tier 2."""


class ThreadReply:
    """One answer in a thread; `append` text as it arrives, `close` when done."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        thread_ts: str,
        recipient_user_id: str | None,
        recipient_team_id: str | None,
        use_streaming: bool = True,
        flush_seconds: float = FLUSH_SECONDS,
        flush_chars: int = FLUSH_CHARS,
        max_messages: int = MAX_MESSAGES,
        clock: Callable[[], float] = time.monotonic,
        before_start: Callable[[], Awaitable[None]] | None = None,
        short: Callable[[str], bool] | None = None,
        spent: Callable[[str], bool] | None = None,
        keeper: AnswerKeeper | None = None,
        stream_slot: Callable[[], Awaitable[bool]] | None = None,
        stream_busy: Callable[[], bool] | None = None,
        lead: str = "",
    ) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts
        self.recipient_user_id = recipient_user_id
        self.recipient_team_id = recipient_team_id
        self.use_streaming = use_streaming and recipient_user_id is not None
        self.flush_seconds = flush_seconds
        self.flush_chars = flush_chars
        self.max_messages = max_messages
        self.clock = clock
        self.before_start = before_start
        """Awaited before the answer's first message (what was said before it is sent first)."""
        self.short = short
        """`short(method)`: the pacer has no call of `method` to spend right now."""
        self.spent = spent
        """`spent(method)`: `method`'s bucket is being spent (a storm): no piece goes for its
        size, only once per `flush_seconds` (six long answers written at once spent Tier 4's
        whole burst of `chat.appendStream` in 2,000-character pieces, and the next waited)."""
        self.keeper = keeper
        """Where the answer's ending is kept until Slack shows it (`bot.slack.endings`)."""
        self.stream_slot = stream_slot
        """Takes a `chat.startStream` slot free within `START_WITHIN`, or says there is none
        (then the rest of the answer is posted in whole messages), before each stream starts;
        None: always stream."""
        self.stream_busy = stream_busy
        """Streams are being spent (part of their burst went in the last seconds): the first
        text is held up to `FIRST_HOLD` (None: never)."""
        self._first: float | None = None
        """When the answer's first text came (the clock's)."""
        self._whole = False
        """Posted in whole messages: nothing is sent of a message until it is full or ends."""
        self._slot = False
        """A stream slot was asked for the message being written (`_slot_for_stream`)."""
        self.raw: list[str] = []
        """The whole answer as the model wrote it: the attached file when it is too long."""
        self.text = f"{lead}\n\n" if lead else ""
        """The current message's text (escaped); Slack has its first `_sent` characters. It
        starts with `lead` (mrkdwn: what the thread shows before the answer, in its message)."""
        self._sent = 0
        self._finished = 0
        self._full = False
        self._stream: Any = None
        self._posted_ts: str | None = None
        self._last: tuple[str, str] | None = None
        """The last posted (not streamed) message: its ts and text."""
        self._last_send = 0.0
        self._links = LinkGuard()

    @property
    def _limit(self) -> int:
        # A message posted whole is never edited: it may be as long as a streamed one.
        return MAX_STREAMED if self.use_streaming or self._whole else MAX_MESSAGE

    async def append(self, raw: str) -> None:
        """Add model text. Markdown links and images are shown as words with their URL (a link
        split across chunks waits for its end), and the rest is escaped (`bot.slack.mrkdwn`)."""
        if not raw:
            return
        self.raw.append(raw)
        await self._add(self._links.feed(raw))

    async def _add(self, shown: str) -> None:
        if not self._full and self._finished >= self.max_messages:
            self._full = True  # a cut-off stream used the last message: the rest is the file
        if self._full or not shown:
            return
        self.text += escape_mrkdwn(shown)
        if self._holding():
            return
        await self._slot_for_stream()
        while len(self.text) > self._limit:
            last = self._finished + 1 >= self.max_messages
            cut = split_point(self.text, self._limit - (len(MORE_IN_FILE) if last else 0))
            head, rest = self.text[:cut], self.text[cut:].lstrip("\n")
            self.text = head
            if last:
                self._full = True
                await self._finish_message(MORE_IN_FILE)
                return
            await self._finish_message("")
            if self._finished >= self.max_messages:  # a cut-off stream took the last one
                self._full = True
                return
            self.text = rest
        if self._whole:
            return
        waiting = len(self.text) - self._sent
        # Slack's bucket for the next call is short: send bigger pieces, less often, instead of
        # queueing small ones behind it.
        method = "chat.appendStream" if self.use_streaming else "chat.update"
        busy = self.started and self.short is not None and self.short(method)
        by_size = self.spent is None or not self.spent(method)
        flush_chars = self.flush_chars * (BUSY_FACTOR if busy else 1)
        due = self.clock() - self._last_send >= self.flush_seconds * (BUSY_FACTOR if busy else 1)
        if (by_size and waiting >= flush_chars) or (waiting > 0 and (due or not self.started)):
            await self._send()

    def _holding(self) -> bool:
        """Nothing is sent yet of an answer whose first text came under `FIRST_HOLD` ago while
        streams are being spent: complete by then, it is posted whole (`close`)."""
        if self.started or not self.use_streaming or self.stream_busy is None:
            return False
        now = self.clock()
        if self._first is None:  # judged once, at the first text: not a storm, no hold
            self._first = now if self.stream_busy() else -math.inf
        return now - self._first < FIRST_HOLD and len(self.text) <= self._limit

    async def _slot_for_stream(self) -> bool:
        """Whether the message being written streams: a stream about to start takes its
        `chat.startStream` slot first (each message of a long answer is a stream of its own);
        with none free within `START_WITHIN`, the rest of the answer is posted whole."""
        if self.use_streaming and self._stream is None and not self._slot and self.stream_slot:
            self._slot = True
            if not await self.stream_slot():
                self.use_streaming, self._whole = False, True
        return self.use_streaming

    async def _send(self) -> None:
        """Give Slack the current message's waiting text."""
        await self._before()
        if self.use_streaming and not await self._slot_for_stream():
            return  # posted whole from here: nothing is sent until a message is full or ends
        if self.use_streaming:
            try:
                await self._stream_send()
                return
            except SlackApiError as exc:
                self._fall_back(exc)
                while len(self.text) > MAX_MESSAGE:  # what was one streamed message
                    cut = split_point(self.text, MAX_MESSAGE)
                    rest = self.text[cut:].lstrip("\n")
                    self.text = self.text[:cut]
                    await self._finish_message("")
                    self.text = rest
        await self._write(self.text)
        self._sent = len(self.text)
        self._last_send = self.clock()

    async def _before(self) -> None:
        """What was said in the thread before the answer is sent first (once)."""
        if self.before_start is not None:
            before, self.before_start = self.before_start, None
            await before()

    async def _stream_send(self) -> None:
        waiting = self.text[self._sent :]
        if self._stream is None:
            self._stream = await self.client.chat_stream(
                channel=self.channel,
                thread_ts=self.thread_ts,
                recipient_user_id=self.recipient_user_id,
                recipient_team_id=self.recipient_team_id,
                buffer_size=1,  # batching happens here, by size and time
            )
            # `chunks` forces the first flush: if the workspace cannot stream we learn it now,
            # not at the end when the text would be lost.
            await self._stream.append(markdown_text=waiting, chunks=[])
        else:
            await self._stream.append(markdown_text=waiting)
        self._sent = len(self.text)
        self._last_send = self.clock()

    async def _finish_message(self, note: str, blocks: list[dict[str, Any]] | None = None) -> bool:
        """End the current message with its waiting text (and `note`); the next text starts a
        new one. True when `blocks` ended the streamed message (only a stream can take them
        under its text)."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            try:
                await stream.stop(markdown_text=self.text[self._sent :] + note, blocks=blocks)
                self._reset()
                return blocks is not None
            except SlackApiError as exc:
                self._fall_back(exc, stream)
        if self.text or note:
            await self._write(self.text + note)
        self._reset()
        return False

    def _reset(self) -> None:
        self._finished += 1
        self._slot = False
        self.text, self._sent, self._posted_ts = "", 0, None
        self._last_send = self.clock()

    def _fall_back(self, exc: SlackApiError, stream: Any = None) -> None:
        """Streaming failed: from now on post-and-edit, starting with the current message. A
        cut-off stream's message stays the current one (`chat.update` takes it over), so its
        text is never shown twice and it counts once against the cap."""
        stream = self._stream if stream is None else stream
        error = exc.response.get("error")
        if error in _STREAM_UNAVAILABLE:
            logger.info("streaming unavailable (%s); editing a message instead", error)
        else:
            logger.warning("streaming failed (%s); editing a message instead", error)
        self.use_streaming = False
        self._stream = None
        self._sent = 0
        ts = getattr(stream, "ts", None)
        self._posted_ts = str(ts) if ts else None

    async def _write(self, text: str) -> None:
        await self._before()
        limit = self._limit
        while len(text) > limit:  # a streamed message is longer than an edited one
            if self._finished + 1 >= self.max_messages:  # the cap holds here too
                cut = split_point(text, limit - len(MORE_IN_FILE))
                text, self._full = text[:cut] + MORE_IN_FILE, True
                break
            cut = split_point(text, limit)
            await self._write_one(text[:cut])
            self._posted_ts = None
            self._finished += 1
            text = text[cut:].lstrip("\n")
        await self._write_one(text)

    async def _write_one(self, text: str) -> None:
        if self._posted_ts is None:
            response = await self.client.chat_postMessage(
                channel=self.channel, thread_ts=self.thread_ts, text=text
            )
            self._posted_ts = str(response["ts"])
        else:
            await self.client.chat_update(channel=self.channel, ts=self._posted_ts, text=text)
        self._last = (self._posted_ts, text)

    @property
    def started(self) -> bool:
        return self._stream is not None or self._posted_ts is not None or self._finished > 0

    async def close(
        self,
        blocks: list[dict[str, Any]] | None = None,
        answered: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Finish the answer; attach the whole of it if it did not fit. Safe to call twice.
        `blocks` end the answer (the feedback buttons): under a streamed message's text, or
        under the last posted message's text, redrawn as section blocks. With a `keeper`, what
        Slack still lacks is kept there first (then `answered` is awaited), and finished from
        there if this cannot."""
        await self._add(self._links.flush())
        if self.text or self._full:
            await self._before()
        if self.keeper is not None and (ending := self._ending(blocks)) is not None:
            row_id = await self.keeper.keep(ending)
            if row_id is not None:
                if answered is not None:
                    await _quietly(answered)
                await self._end_kept(self.keeper, row_id, ending)
                return
        await self._close_now(blocks)

    def _ending(self, blocks: list[dict[str, Any]] | None) -> Ending | None:
        """What Slack still lacks of the answer: the current message whole, its blocks, the
        file; None when it has all of it."""
        ts: str | None
        if self.text:
            ts = self._posted_ts
            if self._stream is not None:  # its ts is None when the stream never began
                ts = str(self._stream.ts) if self._stream.ts else None
            text = self.text
        elif blocks is not None and self._last is not None:
            ts, text = self._last
        else:
            ts, text, blocks = None, "", None
        file = "".join(self.raw) if self._full else None
        if not text and file is None:
            return None
        mark = secrets.token_hex(8) if ts is None else None  # to be posted: findable
        return Ending(self.channel, self.thread_ts, ts, text, tuple(blocks or ()), file, mark)

    async def _end_kept(self, keeper: AnswerKeeper, row_id: str, ending: Ending) -> None:
        """Make the kept ending: a healthy stream is stopped with the rest of its text, else the
        message is redrawn whole; either done, the row goes; not done, the sender makes it."""
        stream, self._stream = self._stream, None
        waiting = self.text[self._sent :]
        self._reset()
        self._full, self._last = False, None
        try:
            if stream is not None:
                await stream.stop(markdown_text=waiting, blocks=list(ending.blocks) or None)
                if ending.file is not None:
                    await finish_answer(self.client, {**ending.params(), "text": "", "blocks": []})
            else:
                await finish_answer(self.client, ending.params())
        except SLACK_ERRORS as exc:
            logger.warning("the answer's end failed (%s); the outbox sends it", slack_error(exc))
            await keeper.release(row_id)
            return
        await keeper.kept(row_id)

    async def _close_now(self, blocks: list[dict[str, Any]] | None) -> None:
        shown = False
        if self._stream is not None or self._sent < len(self.text):
            shown = await self._finish_message("", blocks)
        if blocks is not None and not shown and self._last is not None:
            ts, text = self._last
            await self.client.chat_update(
                channel=self.channel, ts=ts, text=text, blocks=_sections(text) + blocks
            )
        if self._full:
            self._full = False
            await self.client.files_upload_v2(
                channel=self.channel,
                thread_ts=self.thread_ts,
                filename=FILE_NAME,
                title=FILE_TITLE,
                content="".join(self.raw),
            )


async def _quietly(step: Callable[[], Awaitable[None]]) -> None:
    """The caller's step on a kept ending: its failure must not keep the answer from Slack."""
    try:
        await step()
    except Exception:
        logger.exception("the step after keeping the answer's end failed")
