"""A run's timeline in Slack: each tool call a task in a streamed message, or, where streaming
is not available, one context block edited in place; and the thread's assistant status.

Slack's streaming API shows `task_update` chunks as task cards (`task_display_mode=timeline`):
each has an id, a title, a status (pending, in_progress, complete, error) and details. The run's
own statuses (`bot.runs.timeline.TaskStatus`) map onto those, the rest is said in the details.
Titles and details are untrusted text (tool names and arguments come from the model): they
go through `bot.slack.mrkdwn` and are cut to Slack's sizes (`TASK_TITLE_MAX`, `TASK_DETAILS_MAX`).
The model's plan (`bot.runs.timeline.plan_steps`) is a `plan_update` chunk (slack_sdk's
`PlanUpdateChunk`: a title, "Plan: 1. … · 2. …", within `PLAN_TITLE_MAX`), or the first line
of the fallback's context block.

All the Web API calls of this module are made by `SlackTimeline` and `set_status`, so that
they can be routed through an outbox later; like every output call they never raise.
`SlackTimeline` holds the changes it is shown until the run's timeline flushes them
(`bot.runs.timeline`: when the run waits) and sends them coalesced: one `appendStream` (or one
edit) with the latest chunk of each task.

Why a timeline at all: while a run works, its thread shows nothing else (the answer comes at the
end), and a person waiting on an incident wants to see what ran. In a storm it is skipped when
that is already shown or soon will be: while the workspace-wide bucket its first write spends is
short (`chat.startStream`, Tier 2, whose slot a stream takes from the replicas' shared bucket
before it starts; `chat.update` without streaming), a timeline not yet shown is held instead of
started for its first `STORM_GRACE` seconds, and while every task it holds waits
for approval (the cards show those); one that is closed while held is never shown (the run's
answer and its cards say how it went), so a run that ends within a few seconds of a storm costs
no timeline call at all. A timeline whose every task waits for approval is not started
either while that bucket is merely being spent (part of its burst went in the last seconds):
shown, it would cost an edit more when the run resumes, to say what the cards say; nor, storm or
not, once each of those tasks links to its card (the thread shows the cards and the status
line says who is asked: the storm's first runs cannot know one is coming). A timeline
already shown as an edited message is edited at most once
per `STORM_EDIT_EVERY` while `chat.update` is short (the changes between join the next edit; its
last edit is never held).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.messages.chunk import PlanUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from ..runs.output import Thread
from ..runs.timeline import AssistantStatus, Task, Waiting, Working
from ..words import format_duration
from .ids import SLACK_ERRORS, slack_error
from .mrkdwn import escape_cut, one_line, user_mention
from .pacing import bucket_short, pacer_of

__all__ = [
    "CONTEXT_TEXT_MAX",
    "PLAN_TITLE_MAX",
    "STORM_EDIT_EVERY",
    "STORM_GRACE",
    "TASK_DETAILS_MAX",
    "TASK_TITLE_MAX",
    "SlackTimeline",
    "plan_chunk",
    "plan_title",
    "status_text",
    "task_chunk",
    "task_line",
    "timeline_blocks",
]

logger = logging.getLogger("opsgate.slack.timeline")

TASK_TITLE_MAX = 256
"""Longest task title sent (Slack's chunk limit on a task's text fields)."""
TASK_DETAILS_MAX = 256
"""Longest task details sent (Slack: 256 characters)."""
PLAN_TITLE_MAX = 256
"""Longest plan title sent (a `plan_update` chunk's title, like a task's)."""
CONTEXT_TEXT_MAX = 3000
"""Longest text of the fallback's context block element."""
STATUS_MAX = 120
"""Longest assistant status line sent."""
STORM_GRACE = 4.0
"""Seconds a timeline not yet shown is held while its first write's bucket is short (a run
that ends sooner shows none)."""
STORM_EDIT_EVERY = 3.0
"""Fewest seconds between two edits of a shown timeline while `chat.update` is short."""

_SLACK_STATUS = {
    "pending": "pending",
    "waiting": "pending",
    "in_progress": "in_progress",
    "complete": "complete",
    "error": "error",
    "rejected": "error",
    "expired": "error",
    "not_run": "error",
    "approved": "complete",
}
_MARKS = {
    "pending": "◻️",
    "waiting": "⏸️",
    "in_progress": "⏳",
    "complete": "✅",
    "error": "❌",
    "rejected": "🚫",
    "expired": "⌛",
    "not_run": "⏭️",
    "approved": "☑️",
}
_STREAM_EXPIRED = "message_not_in_streaming_state"
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


def _title(task: Task, limit: int) -> str:
    arguments = task.arguments
    shown = f"{task.tool} {arguments}" if arguments and arguments != "{}" else task.tool
    return one_line(shown, limit)


def _seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return format_duration(timedelta(seconds=seconds), approximate=True)


def _details(task: Task) -> str:
    """What the task's status means, in words (mrkdwn: the mentions are Slack's markup)."""
    parts: list[str] = []
    match task.status:
        case "waiting":
            # The count is known once the card is posted (before: "waiting for approval").
            got = f" ({task.approvals[0]} of {task.approvals[1]})" if task.approvals else ""
            parts.append(f"waiting for approval{got}")
        case "pending":
            parts.append("waiting to run")
        case "in_progress":
            parts.append("running")
        case "complete" | "error":
            ran = "ran" if task.status == "complete" else "failed"
            took = f" in {_seconds(task.seconds)}" if task.seconds is not None else ""
            parts.append(f"{ran}{took}")
        case "rejected":
            parts.append(
                "rejected" + (f" by {user_mention(task.decided_by)}" if task.decided_by else "")
            )
        case "expired":
            parts.append("expired: nobody decided in time")
        case "not_run":
            parts.append("not run")
        case "approved":
            by = f" by {user_mention(task.decided_by)}" if task.decided_by else ""
            parts.append(f"approved{by}: it runs in the timeline below")
            return "; ".join(parts)
    if task.decided_by and task.status in ("in_progress", "complete", "error", "pending"):
        parts.append(f"approved by {user_mention(task.decided_by)}")
    if task.allowance_by:
        parts.append(f"under the allowance granted by {user_mention(task.allowance_by)}")
    return "; ".join(parts)


def task_chunk(task: Task) -> dict[str, Any]:
    """The task as a `task_update` chunk, within Slack's sizes."""
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": task.call_id[:64] or "task",
        "title": _title(task, TASK_TITLE_MAX),
        "status": _SLACK_STATUS[task.status],
        "details": _details(task)[:TASK_DETAILS_MAX],
    }
    if task.card_link and task.status == "waiting":
        chunk["sources"] = [{"type": "url", "url": task.card_link, "text": "approval card"}]
    return chunk


def task_line(task: Task) -> str:
    """The task as one mrkdwn line of the fallback's context block."""
    link = (
        f" · <{task.card_link}|approval card>"
        if task.card_link and task.status == "waiting"
        else ""
    )
    return f"{_MARKS[task.status]} {_title(task, 120)} — {_details(task)}{link}"


def plan_title(steps: tuple[str, ...], limit: int = PLAN_TITLE_MAX) -> str:
    """The model's steps as one escaped line of at most `limit` characters."""
    return one_line("Plan: " + " · ".join(f"{n}. {s}" for n, s in enumerate(steps, 1)), limit)


def plan_chunk(steps: tuple[str, ...]) -> dict[str, Any]:
    """The plan as a `plan_update` chunk."""
    chunk: dict[str, Any] = PlanUpdateChunk(title=plan_title(steps)).to_dict()
    return chunk


def timeline_blocks(tasks: list[Task], plan: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The whole timeline as one context block (the fallback path), cut to its size; the
    plan, when the model gave one, is its first line."""
    lines: list[str] = [f"🗒️ {plan_title(plan, 600)}"] if plan else []
    used = len(lines[0]) + 1 if lines else 0
    for n, task in enumerate(tasks):
        line = task_line(task)
        if used + len(line) + 1 > CONTEXT_TEXT_MAX - 40:
            lines.append(f"… and {len(tasks) - n} more")
            break
        lines.append(line)
        used += len(line) + 1
    return [{"type": "context", "elements": [{"type": "mrkdwn", "text": "\n".join(lines)}]}]


def status_text(status: AssistantStatus) -> str:
    """The assistant status line ("is thinking…"), within `STATUS_MAX`."""
    match status:
        case Working():
            return "is working on it…"
        case Waiting(users=users, groups=groups):
            who = [user_mention(u) for u in users] + [f"<!subteam^{g}>" for g in groups]
            if not who:
                return "is waiting for approval"
            text = "is waiting for approval from " + ", ".join(who)
            return text if len(text) <= STATUS_MAX else "is waiting for approval"


async def set_status(
    client: AsyncWebClient, thread: Thread, status: AssistantStatus | None
) -> None:
    """`assistant.threads.setStatus`, best effort: a refusal is logged, never raised."""
    try:
        await client.assistant_threads_setStatus(
            channel_id=thread.channel_id,
            thread_ts=thread.thread_ts,
            status="" if status is None else status_text(status),
        )
    except SLACK_ERRORS as exc:  # a status line never stops a run
        logger.debug("could not set the status in %s: %s", thread.channel_id, slack_error(exc))


class SlackTimeline:
    """One run's timeline in a thread (a `TimelineSink`): a streamed message of task chunks
    addressed to `recipient_user_id`, or a posted message whose context block is edited."""

    def __init__(
        self,
        client: AsyncWebClient,
        thread: Thread,
        *,
        recipient_user_id: str | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.thread = thread
        self.recipient_user_id = recipient_user_id
        self.use_streaming = recipient_user_id is not None
        self._short = bucket_short(client)
        """`short(method)`: the paced client has no call of `method` to spend right now."""
        pacer = pacer_of(client)
        self._slot = pacer.claim_in_time if pacer is not None else None
        """Takes a call of a method free within a time (`Pacer.claim_in_time`: from the
        replicas' shared bucket, whose spending a replica's own mirror may not show yet)."""
        self._busy = functools.partial(pacer.busy, beyond=1) if pacer is not None else None
        """`busy(method)`: more of `method`'s burst went in the last seconds than one run spends
        before its pause (its answer's stream, tried even where Slack refuses it): a storm."""
        self._clock = clock
        self._born = clock()
        self._wrote = 0.0
        """When the last write was made (the clock's time)."""
        self._stormed = False
        """Held for a storm before it was ever shown: a close drops it unshown."""
        self._tasks: dict[str, Task] = {}
        self._plan: tuple[str, ...] = ()
        self._held: dict[str, dict[str, Any]] = {}
        """Chunks not sent yet, by task id ("" for the plan): the latest of each only."""
        self._ts: str | None = None
        self._posted = False
        """`_ts` is a message this timeline posted (not a stream's): a resume can go on in it."""
        self._streaming_ts: str | None = None
        self._sending = asyncio.Lock()
        """One write at a time, in order: a close that comes while the stream is being
        started (a paused run resumed at once) stops the stream that start made."""

    async def show(self, task: Task) -> None:
        self._tasks[task.call_id] = task
        self._held[task.call_id] = task_chunk(task)

    async def plan(self, steps: tuple[str, ...]) -> None:
        self._plan = steps
        self._held[""] = plan_chunk(steps)

    async def flush(self) -> None:
        """What changed since the last flush, in one Web API call."""
        async with self._sending:
            await self._flush()

    def _shown(self) -> bool:
        return self._streaming_ts is not None or self._ts is not None

    async def _hold(self, *, resting: bool, closing: bool) -> bool:
        """Whether a storm keeps what is held from Slack for now (see the module docstring):
        `resting`, no flush comes for a while (an edit is not held then); `closing`, none
        comes again (a timeline never shown is dropped then)."""
        if self._short is None:
            return False
        now = self._clock()
        if self._shown():
            edits = not self.use_streaming or self._streaming_ts is None
            soon = now - self._wrote < STORM_EDIT_EVERY
            return edits and not resting and soon and self._short("chat.update")
        if closing and self._stormed:
            return True
        first = "chat.startStream" if self.use_streaming else "chat.update"
        tasks = self._tasks.values()
        waiting = all(task.status == "waiting" for task in tasks)
        if tasks and all(task.status == "waiting" and task.card_link for task in tasks):
            self._stormed = True  # each has its card in the thread, which says all of it
            return True
        if waiting and self._busy is not None and self._busy(first):
            self._stormed = True  # the cards show it: its close would cost an edit more
            return True
        if await self._free(first):
            return False
        self._stormed = now - self._born < STORM_GRACE or waiting
        return self._stormed

    async def _free(self, first: str) -> bool:
        """The timeline's first write can be made now: a stream's start takes its slot now,
        as an answer's does within a second, from the replicas' shared bucket, where each
        replica's own memory of it would let them all start one and wait seconds for it."""
        if first != "chat.startStream" or self._slot is None:
            return not (self._short is not None and self._short(first))
        return await self._slot(first, 0.0)

    async def _flush(self, *, resting: bool = False, closing: bool = False) -> None:
        if not self._held:
            return
        if await self._hold(resting=resting or closing, closing=closing):
            if closing:
                logger.debug("a storm's short run in %s shows no timeline", self.thread.channel_id)
                self._held = {}
            return
        self._wrote = self._clock()
        chunks, self._held = list(self._held.values()), {}
        try:
            if self.use_streaming:
                try:
                    await self._stream(chunks)
                    return
                except SlackApiError as exc:
                    self._fall_back(exc)
            await self._edit()
        except SLACK_ERRORS as exc:
            logger.warning("could not show the timeline: %s", slack_error(exc))

    async def _stream(self, chunks: list[dict[str, Any]]) -> None:
        if self._streaming_ts is None:
            response = await self.client.chat_startStream(
                channel=self.thread.channel_id,
                thread_ts=self.thread.thread_ts,
                recipient_user_id=self.recipient_user_id,
                recipient_team_id=self.thread.team_id,
                task_display_mode="timeline",
                chunks=chunks,
            )
            self._streaming_ts = str(response["ts"])
        else:
            await self.client.chat_appendStream(
                channel=self.thread.channel_id, ts=self._streaming_ts, chunks=chunks
            )

    def _fall_back(self, exc: SlackApiError) -> None:
        error = exc.response.get("error")
        self.use_streaming = False
        if error == _STREAM_EXPIRED and self._streaming_ts is not None:
            # Slack ends a stream that has had no appends for a while (a pause waiting for
            # people): the same message is edited from now on, as the fallback's block.
            logger.info("the timeline's stream expired; editing its message")
            self._ts, self._streaming_ts = self._streaming_ts, None
            return
        level = logging.INFO if error in _STREAM_UNAVAILABLE else logging.WARNING
        logger.log(level, "timeline streaming unavailable (%s); editing a message", error)
        # A stream already started keeps what it showed; the rest goes to a posted message.

    async def _edit(self) -> None:
        tasks = list(self._tasks.values())
        blocks = timeline_blocks(tasks, self._plan)
        text = escape_cut(f"Steps: {len(tasks)}", 100)
        if self._ts is None:
            response = await self.client.chat_postMessage(
                channel=self.thread.channel_id,
                thread_ts=self.thread.thread_ts,
                text=text,
                blocks=blocks,
            )
            self._ts, self._posted = str(response["ts"]), True
        else:
            await self.client.chat_update(
                channel=self.thread.channel_id, ts=self._ts, text=text, blocks=blocks
            )

    def message(self) -> str | None:
        """The posted message the timeline is edited in (Slack refused streaming), which a
        resume goes on in; None for a stream (a resume streams its own, as Slack cannot
        reopen one) and before anything was posted."""
        return self._ts if self._posted else None

    def adopt(self, message: str) -> None:
        """Go on in a paused part's posted message: edit it, never start a stream or post."""
        self._ts, self._posted, self.use_streaming = message, True, False

    async def rest(self) -> None:
        """No task moves for a while (the run paused, or its batch is answered): what is held
        is shown and the stream is ended now, not at the run's end. Slack ends a stream left
        idle anyway, and a stream kept open costs its `chat.stopStream` (Tier 2) in the burst
        of the runs' last words, behind the answers' own streams (30 approvals
        drained in 1.48x the floor, 1.15x so). Later changes (a partial count, a cancel, a
        later turn's calls) edit the same message, as after an expired stream."""
        async with self._sending:
            ts = await self._end_stream("the paused timeline")
            if ts is not None:
                self._ts, self.use_streaming = ts, False

    async def close(self) -> None:
        async with self._sending:
            await self._end_stream("the timeline", closing=True)

    async def _end_stream(self, what: str, *, closing: bool = False) -> str | None:
        """Under `_sending`: show what is held, then stop the stream if one is open; the ts of
        the stream stopped (None: none was open)."""
        await self._flush(resting=True, closing=closing)
        if self._streaming_ts is None:
            return None
        ts, self._streaming_ts = self._streaming_ts, None
        try:
            await self.client.chat_stopStream(channel=self.thread.channel_id, ts=ts)
        except SLACK_ERRORS as exc:
            logger.warning("could not end %s: %s", what, slack_error(exc))
        return ts
