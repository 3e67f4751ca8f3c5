"""Streaming an answer into a Slack thread.

Slack's `chat.startStream`/`appendStream`/`stopStream` (slack_sdk's `chat_stream`) is used where the
workspace offers it. Where it doesn't, the answer is posted once and then edited, at most about
once a second, so a fast model cannot run us into Slack's rate limits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ._text import escape_mrkdwn

__all__ = ["ThreadReply"]

logger = logging.getLogger("opsgate.stream")

_STREAM_UNAVAILABLE = {
    "unknown_method",
    "not_allowed_token_type",
    "missing_scope",
    "method_deprecated",
    "feature_not_enabled",
    "not_authed",
    "invalid_arguments",
}
MAX_MESSAGE = 3500


def _split_point(text: str, limit: int) -> int:
    """Where to end one message of a long answer: a line break or space if there is one in
    the second half, and never inside an escaped `&amp;`/`&lt;`/`&gt;`."""
    for sep in ("\n", " "):
        cut = text.rfind(sep, limit // 2, limit)
        if cut != -1:
            return cut
    amp = text.rfind("&", limit - 5, limit)
    return amp if amp != -1 and ";" not in text[amp:limit] else limit


class ThreadReply:
    """One answer message in a thread; `append` text as it arrives, `close` when done."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        thread_ts: str,
        recipient_user_id: str | None,
        recipient_team_id: str | None,
        use_streaming: bool = True,
        edit_interval: float = 1.0,
        buffer_size: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts
        self.recipient_user_id = recipient_user_id
        self.recipient_team_id = recipient_team_id
        self.use_streaming = use_streaming and recipient_user_id is not None
        self.edit_interval = edit_interval
        self.buffer_size = buffer_size
        self.clock = clock
        self.text = ""
        self._stream: Any = None
        self._posted_ts: str | None = None
        self._last_edit = 0.0
        self._dirty = False

    async def append(self, raw: str) -> None:
        if not raw:
            return
        safe = escape_mrkdwn(raw)
        self.text += safe
        if self.use_streaming:
            try:
                if self._stream is None:
                    self._stream = await self.client.chat_stream(
                        channel=self.channel,
                        thread_ts=self.thread_ts,
                        recipient_user_id=self.recipient_user_id,
                        recipient_team_id=self.recipient_team_id,
                        buffer_size=self.buffer_size,
                    )
                    # `chunks` forces the first flush: if the workspace cannot stream we
                    # learn it now, not at the end when the text would be lost.
                    await self._stream.append(markdown_text=safe, chunks=[])
                else:
                    await self._stream.append(markdown_text=safe)
                return
            except SlackApiError as exc:
                self._fall_back(exc)
        self._dirty = True
        await self._edit(force=False)

    def _fall_back(self, exc: SlackApiError) -> None:
        """Streaming failed: from now on post-and-edit one message holding the whole text."""
        error = exc.response.get("error")
        if error in _STREAM_UNAVAILABLE:
            logger.info("streaming unavailable (%s); editing a message instead", error)
        else:
            logger.warning("streaming failed (%s); editing a message instead", error)
        self.use_streaming = False
        self._stream = None

    async def _edit(self, *, force: bool) -> None:
        # A long answer continues in a new message rather than being cut.
        while len(self.text) > MAX_MESSAGE:
            cut = _split_point(self.text, MAX_MESSAGE)
            head, self.text = self.text[:cut], self.text[cut:].lstrip("\n")
            await self._write(head)
            self._posted_ts = None
        too_soon = self.clock() - self._last_edit < self.edit_interval
        if self._posted_ts is not None and not force and too_soon:
            return
        await self._write(self.text)

    async def _write(self, text: str) -> None:
        if self._posted_ts is None:
            response = await self.client.chat_postMessage(
                channel=self.channel, thread_ts=self.thread_ts, text=text
            )
            self._posted_ts = str(response["ts"])
        else:
            await self.client.chat_update(channel=self.channel, ts=self._posted_ts, text=text)
        self._last_edit = self.clock()
        self._dirty = False

    @property
    def started(self) -> bool:
        return self._stream is not None or self._posted_ts is not None

    async def close(self) -> None:
        """Finish the message. Safe to call more than once and when nothing was written."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            try:
                await stream.stop()
                return
            except SlackApiError as exc:
                self._fall_back(exc)
                self._dirty = True
        if self._dirty:
            await self._edit(force=True)
