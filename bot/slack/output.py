"""`SlackThreadOutput`: the run service's `ThreadOutput` over the Slack Web API.

This is the only code that calls the Web API for a thread (posts, ephemeral replies, reactions,
streamed answers, cards, uploads, permalinks). Every call is best effort: a Slack error is
logged and the run's own bookkeeping goes on (see the contract in `bot.runs.output`).

The writes that need no answer from Slack (notices, card redraws, reactions, Home tabs,
ephemeral replies, files) go through the `outbox` (`bot.slack.outbox`): stored, then sent by its
sender, paced and in priority order, surviving restarts; it is the one write path, so it is
required. Card posts and answers are made here, through the same paced client (429s waited
out), an answer's ending kept in the outbox before it is shown (`bot.slack.endings`). An answer
streams only while a `chat.startStream` slot is free, else it is posted (`bot.slack.streaming`).
Queued messages share one notice per channel and burst (`bot.slack.queue_notice`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from slack_bolt.async_app import AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from ..runs.notices import AllowanceList, Notice, ToolRan
from ..runs.output import PostFailed, TextSink, Thread
from ..runs.timeline import AssistantStatus, TimelineSink
from ..runs.views import AllowForm, CardCall, CardOutcome, CardRef, EditForm, HomeView
from ..store import OutboxEntry, card_redraw
from .cards import (
    approval_card,
    card_file,
    card_text,
    minimal_blocks,
    minimal_file_text,
    overflow,
)
from .home import allowance_blocks, home_entry, home_intent
from .ids import SLACK_ERRORS, card_metadata, find_marked_card, slack_error
from .modals import allow_modal, edit_modal, feedback_blocks, reject_modal
from .mrkdwn import escape_cut, message_link, truncate, user_mention
from .notices import render
from .outbox import NOTICE, REACTION, UPLOAD, SlackOutbox
from .pacing import bucket_short, pacer_of
from .queue_notice import QueueNotices
from .streaming import START_WITHIN, ThreadReply
from .timeline import SlackTimeline, set_status

__all__ = [
    "MARK_SETTLE",
    "REQUEST_SHOWN_MAX",
    "SLACK_ERRORS",
    "SlackReplies",
    "SlackThreadOutput",
    "slack_error",
]

logger = logging.getLogger("opsgate.slack.output")

REQUEST_SHOWN_MAX = 3000
"""Longest request text (escaped) that `/opsgate <request>` shows in its thread root."""
TITLE_MAX = 80
"""Longest conversation title set in the AI-app container (plain text)."""
PROMPT_TITLE_MAX = 75
"""Longest suggested prompt title (the whole prompt is its message)."""
_PERSON = re.compile(r"[UW][A-Z0-9]+")
_WORKING = "eyes"
MARK_SETTLE = 1.0
"""Seconds a 👀 waits before it is sent while 👀 are being spent (part of Tier 3's burst went in
the last seconds: a storm): its removal cancels it unsent, so a run answered within a second
costs no reaction call, where it cost two (the mark, then its removal)."""


class SlackThreadOutput:
    """The `ThreadOutput` the run service calls: threads are Slack threads, notices become
    mrkdwn (`bot.slack.notices`), cards Block Kit (`bot.slack.cards`). The Slack-only calls of
    the listeners are `replies` (`SlackReplies`)."""

    def __init__(self, client: AsyncWebClient, outbox: SlackOutbox, queue: QueueNotices) -> None:
        self.client = client
        self.outbox = outbox
        self.replies = SlackReplies(client, outbox)
        """The Slack-only calls the listeners make (the run service never does)."""
        self.queue = queue
        """Each channel's one "queued" notice per burst (`bot.slack.queue_notice`)."""
        self.held = HeldOutputs(_posts_short(client, outbox))
        """Command outputs shown in the next answer while posts are short (a storm)."""
        self.unmarked: set[tuple[str, str]] = set()
        """Messages left without 👀 while `reactions.add` had no budget (nor their removal)."""
        self._team_id: str | None = None
        self._workspace_url = ""
        self._bot_id: str | None = None

    async def say(self, thread: Thread, notice: Notice) -> None:
        if await self.queue.said(thread, notice):
            return  # the channel's queued notice says it
        if isinstance(notice, ToolRan):
            rendered = render(notice)
            if (pacer := pacer_of(self.client)) is not None:  # other replicas' posts count
                await pacer.fresh("chat.postMessage", thread.channel_id)
            if self.held.hold(thread, rendered.text):
                if (file := rendered.attachment) is not None:
                    await self.outbox.put([_upload(thread, file.filename, file.content)])
                return
        await self._flush(thread)
        await self.outbox.put(self.owed(thread, notice))

    async def _flush(self, thread: Thread) -> None:
        """Post the outputs held for the thread's next answer: something else comes first."""
        if held := self.held.take(thread):
            await self.outbox.put([_post(thread, held)])

    def owed(self, thread: Thread, notice: Notice) -> list[OutboxEntry]:
        rendered = render(notice)
        entries = [_post(thread, rendered.text)]
        if (file := rendered.attachment) is not None:
            entries.append(_upload(thread, file.filename, file.content))
        return entries

    async def tell(self, thread: Thread, user: str, notice: Notice) -> None:
        """An ephemeral reply in the thread that only `user` sees (people only: not bots)."""
        await self.replies.tell_mrkdwn(thread, user, render(notice).text)

    async def react(self, thread: Thread, ts: str, on: bool) -> bool:
        # 👀 is the cheapest sign of work, yet Tier 3 for the workspace: while its budget is
        # spent (a storm) the message goes without, and so without its removal; while it is
        # being spent, the mark settles (`MARK_SETTLE`) and a run answered by then costs none.
        message = (thread.channel_id, ts)
        # Judged before the mark's own token is taken, which would make the bucket spent.
        spent = _spent(self.client)
        settle = MARK_SETTLE if on and spent is not None and spent("reactions.add") else 0.0
        if on and not await _reaction_slot(self.client):
            self.unmarked.add(message)
            return False
        if not on and message in self.unmarked:
            self.unmarked.discard(message)
            return True
        # Added and removed before it was sent: neither is (the removal cancels).
        entry = OutboxEntry(
            "reactions.add" if on else "reactions.remove",
            {"channel": thread.channel_id, "timestamp": ts, "name": _WORKING},
            REACTION,
            channel_id=thread.channel_id,
            key=f"reaction:{thread.channel_id}:{ts}",
            cancels=not on,
            settle=settle,
        )
        await self.outbox.put([entry])
        return True

    def timeline(self, thread: Thread, requester: str | None) -> TimelineSink:
        """Streamed task chunks addressed to the requester (a person), else one context block
        edited in place (`bot.slack.timeline`)."""
        person = requester if requester and _PERSON.fullmatch(requester) else None
        return SlackTimeline(self.client, thread, recipient_user_id=person)

    async def status(self, thread: Thread, status: AssistantStatus | None) -> None:
        # The thread's run is going: its message is no longer queued, if it was (a run that
        # ends or waits moves no queue: the next one's start does).
        if status is not None and status.kind == "working" and self.queue is not None:
            await self.queue.started(thread)
        else:  # the run paused or ended: no answer of it takes what is held
            await self._flush(thread)
        await set_status(self.client, thread, status)

    async def title(self, thread: Thread, request: str) -> None:
        try:
            await self.client.assistant_threads_setTitle(
                channel_id=thread.channel_id,
                thread_ts=thread.thread_ts,
                title=truncate(" ".join(request.split()) or "OpsGate", TITLE_MAX),
            )
        except SLACK_ERRORS as exc:
            logger.info("could not title %s: %s", thread.thread_ts, slack_error(exc))

    def stream(self, thread: Thread, requester: str | None) -> TextSink:
        # Streaming is addressed to a person; an integration's run gets a posted message.
        person = requester if requester and _PERSON.fullmatch(requester) else None
        return _QuietSink(
            ThreadReply(
                self.client,
                channel=thread.channel_id,
                thread_ts=thread.thread_ts,
                recipient_user_id=person,
                recipient_team_id=thread.team_id,
                before_start=self._settled(thread),
                short=bucket_short(self.client),
                spent=_spent(self.client),
                keeper=self.outbox,
                stream_slot=_stream_slot(self.client),
                stream_busy=_stream_busy(self.client),
                lead=self.held.take(thread),
            )
        )

    def _settled(self, thread: Thread) -> Callable[[], Awaitable[None]]:
        outbox = self.outbox
        return lambda: outbox.settled(thread.channel_id, thread.thread_ts)

    async def post_card(self, thread: Thread, card: CardCall) -> CardRef | PostFailed:
        """Post the card. Arguments too long for it are attached first: when that fails the
        card goes out without its Approve button (nobody could read what would run)."""
        await self._flush(thread)
        await self.outbox.settled(thread.channel_id, thread.thread_ts)
        if (full := overflow(card)) is not None:
            name = card_file(card.tool, card.call_id)
            if not await self._upload(thread, name, full):
                card = replace(card, locked="arguments_not_attached")
        try:
            response = await self.client.chat_postMessage(
                channel=thread.channel_id,
                thread_ts=thread.thread_ts,
                text=card_text(card),
                blocks=approval_card(card),
                metadata=card_metadata(card),
            )
        except SLACK_ERRORS as exc:
            logger.error("could not post the card for %s: %s", card.ledger_id, slack_error(exc))
            if slack_error(exc) != "invalid_blocks":
                return PostFailed(slack_error(exc))
            return await self._post_minimal_card(thread, card)
        return CardRef(str(response["channel"]), str(response["ts"]), card.locked)

    async def _post_minimal_card(self, thread: Thread, card: CardCall) -> CardRef | PostFailed:
        """Slack refused the card's blocks: the same blocks would be refused again, so post the
        minimal card (`bot.slack.cards`) with the arguments attached."""
        name = card_file(card.tool, card.call_id)
        if not await self._upload(thread, name, minimal_file_text(card)):
            card = replace(card, locked="arguments_not_attached")
        try:
            response = await self.client.chat_postMessage(
                channel=thread.channel_id,
                thread_ts=thread.thread_ts,
                text=card_text(card),
                blocks=minimal_blocks(card, name),
                metadata=card_metadata(card),
            )
        except SLACK_ERRORS as exc:
            logger.error("the minimal card for %s failed too: %s", card.ledger_id, slack_error(exc))
            return PostFailed(slack_error(exc))
        return CardRef(str(response["channel"]), str(response["ts"]), card.locked)

    async def find_card(self, thread: Thread, ledger_id: str) -> CardRef | None:
        """This bot's card for `ledger_id` in the thread (its message metadata names the call),
        or None; a failed search is None too (the caller posts: a duplicate card at worst)."""
        try:
            await self._home_team()
            return await find_marked_card(
                self.client, self._bot_id or "", thread.channel_id, thread.thread_ts, ledger_id
            )
        except SLACK_ERRORS as exc:
            logger.warning("could not look for the card of %s: %s", ledger_id, slack_error(exc))
            return None

    async def update_card(
        self, ref: CardRef, card: CardCall, outcome: CardOutcome | None
    ) -> PostFailed | None:
        # An intent, keyed by the card: only the latest unsent redraw is kept, and the outbox's
        # card renderer draws it from the call's state when it is sent.
        await self.outbox.put([card_redraw(card.ledger_id, ref.channel_id)])
        return None

    async def upload(self, thread: Thread, filename: str, content: str) -> None:
        await self.outbox.put([_upload(thread, filename, content)])

    async def _upload(self, thread: Thread, filename: str, content: str) -> bool:
        try:
            await self.client.files_upload_v2(
                channel=thread.channel_id,
                thread_ts=thread.thread_ts,
                filename=filename,
                content=content,
                title=filename,
            )
        except SLACK_ERRORS as exc:
            logger.warning("file upload failed: %s", slack_error(exc))
            return False
        return True

    async def permalink(self, ref: CardRef) -> str | None:
        """Built like Slack's own links: `chat.getPermalink` is Tier 4, a tick links 10,000."""
        try:
            await self._home_team()
            response = message_link(self._workspace_url, ref.channel_id, ref.ts) or (
                await self.client.chat_getPermalink(channel=ref.channel_id, message_ts=ref.ts)
            )
        except SLACK_ERRORS:
            return None
        link = response if isinstance(response, str) else response.get("permalink")
        return str(link) if link else None

    async def post_root(self, channel: str, requester: str, text: str) -> Thread | PostFailed:
        try:
            posted = await self.client.chat_postMessage(
                channel=channel,
                text=f"{user_mention(requester)} asked: {escape_cut(text, REQUEST_SHOWN_MAX)}",
            )
        except SLACK_ERRORS as exc:
            return PostFailed(slack_error(exc))
        message: dict[str, Any] = posted.get("message") or {}
        team = str(message.get("team") or await self._home_team())
        return Thread(team, str(posted["channel"]), str(posted["ts"]))

    async def _home_team(self) -> str:
        """The bot's workspace (`auth.test`), for a posted message that does not name it."""
        if self._team_id is None:
            response = await self.client.auth_test()
            self._team_id = str(response.get("team_id") or "")
            self._bot_id = str(response.get("bot_id") or "")
            self._workspace_url = str(response.get("url") or "")
        return self._team_id


class SlackReplies:
    """What only Slack's listeners call, apart from the `ThreadOutput` the service uses: answers
    to the one person who clicked, typed a command or opened a tab. Ephemeral replies (the
    Slack layer's own words), slash-command answers, the reject and edit modals, the Home tab.
    """

    def __init__(self, client: AsyncWebClient, outbox: SlackOutbox) -> None:
        self.client = client
        self.outbox = outbox

    async def tell_mrkdwn(
        self, thread: Thread, user: str, text: str, *, direct: bool = False
    ) -> None:
        """`tell` for the Slack layer's own words (`text` is mrkdwn, already escaped).
        `direct`: sent now, not through the outbox (to say the database did not answer)."""
        if not _PERSON.fullmatch(user):
            return
        if not direct:
            params = {
                "channel": thread.channel_id,
                "user": user,
                "thread_ts": thread.thread_ts,
                "text": text,
            }
            entry = OutboxEntry("chat.postEphemeral", params, NOTICE, channel_id=thread.channel_id)
            await self.outbox.put([entry])
            return
        try:
            await self.client.chat_postEphemeral(
                channel=thread.channel_id, user=user, thread_ts=thread.thread_ts, text=text
            )
        except SLACK_ERRORS as exc:
            logger.warning("could not tell %s: %s", user, slack_error(exc))

    async def answer_command(
        self, respond: AsyncRespond | None, *, channel: str, user: str, notice: Notice
    ) -> None:
        """A private answer to a slash command: through its response_url (`respond`, when the
        command has one), else `chat.postEphemeral` in the channel."""
        await self.answer_command_mrkdwn(
            respond, channel=channel, user=user, text=render(notice).text
        )

    async def answer_command_mrkdwn(
        self, respond: AsyncRespond | None, *, channel: str, user: str, text: str
    ) -> None:
        """`answer_command` for the Slack layer's own words (`text` is mrkdwn)."""
        if respond is not None:
            try:
                await respond(text=text, response_type="ephemeral")
                return
            except Exception:  # the hook is gone or refused; fall back to the Web API
                logger.warning("answering a command through response_url failed", exc_info=True)
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=text)
        except SLACK_ERRORS as exc:
            logger.warning("could not answer %s: %s", user, slack_error(exc))

    async def open_reject_form(
        self, trigger_id: str, ledger_id: str, reasons: Sequence[str] = ()
    ) -> PostFailed | None:
        """Open the modal asking why a call is rejected (within 3 s of the click)."""
        return await self._open(trigger_id, reject_modal(ledger_id, reasons))

    async def open_edit_form(self, trigger_id: str, form: EditForm) -> PostFailed | None:
        """Open the modal to edit a call's arguments (within 3 s of the click)."""
        return await self._open(trigger_id, edit_modal(form))

    async def open_allow_form(self, trigger_id: str, form: AllowForm) -> PostFailed | None:
        """Open the Allow dialog: which shape an allowance covers (within 3 s of the click)."""
        return await self._open(trigger_id, allow_modal(form))

    async def open_view(self, trigger_id: str, view: dict[str, Any]) -> PostFailed | None:
        """Open a modal of the Slack layer's own (e.g. the feedback reason)."""
        return await self._open(trigger_id, view)

    async def _open(self, trigger_id: str, view: dict[str, Any]) -> PostFailed | None:
        try:
            await self.client.views_open(trigger_id=trigger_id, view=view)
        except SLACK_ERRORS as exc:
            return PostFailed(slack_error(exc))
        return None

    async def suggest_prompts(self, thread: Thread, prompts: Sequence[str]) -> None:
        """Offer the policy's prompts at the start of a conversation in the AI-app container.
        A thread without a ts is a DM as a whole (the agent messaging experience): Slack drops
        a call of such an app that names a thread, so none is named."""
        if not prompts:
            return
        try:
            await self.client.assistant_threads_setSuggestedPrompts(
                channel_id=thread.channel_id,
                thread_ts=thread.thread_ts or None,  # None: left out of the call
                prompts=[{"title": truncate(p, PROMPT_TITLE_MAX), "message": p} for p in prompts],
            )
        except SLACK_ERRORS as exc:
            logger.warning("could not suggest prompts: %s", slack_error(exc))

    async def owe_home(self, user: str, team: str | None) -> None:
        """Owe `user` their Home tab after a change they see, drawn when it is sent, once per
        burst (`bot.slack.home.home_intent`: the outbox's `HOME_TAB` renderer draws it)."""
        await self.outbox.put([home_intent(user, team)])

    async def publish_home(self, home: HomeView) -> None:
        """Show `home` as its person's Home tab (`views.publish`); through the outbox, one
        publish per person per burst (the latest view: `bot.slack.home.home_entry`)."""
        await self.outbox.put([home_entry(home)])

    async def answer_allowances(
        self, respond: AsyncRespond | None, *, channel: str, user: str, notice: AllowanceList
    ) -> None:
        """`/opsgate allowances`: the list, each with its Revoke button (privately)."""
        text = render(notice).text
        blocks = [b.to_dict() for b in allowance_blocks(notice.entries)] or None
        try:
            if respond is not None:
                await respond(text=text, blocks=blocks, response_type="ephemeral")
            else:
                await self.client.chat_postEphemeral(
                    channel=channel, user=user, text=text, blocks=blocks
                )
        except Exception:  # best effort, like every answer
            logger.warning("could not list allowances for %s", user, exc_info=True)


def _posts_short(client: AsyncWebClient, outbox: SlackOutbox) -> Callable[[Thread], bool] | None:
    """The paced client's "the thread's channel's posts are being spent" test (a storm there):
    its bucket is, or messages put for its other threads are still to be sent (runs saying
    their outputs at once find the bucket full, and each would post)."""
    if (pacer := pacer_of(client)) is None:
        return None
    return lambda thread: (
        pacer.busy("chat.postMessage", thread.channel_id)
        or outbox.owes(thread.channel_id, thread.thread_ts)
    )


async def _reaction_slot(client: AsyncWebClient) -> bool:
    """A `reactions.add` can be sent within a second (its token taken for it; across replicas
    from their shared bucket: each judging from its own copy of it sent more than it holds)."""
    pacer = pacer_of(client)
    return pacer is None or await pacer.claim_in_time("reactions.add", 1.0)


def _stream_slot(client: AsyncWebClient) -> Callable[[], Awaitable[bool]] | None:
    """Takes a `chat.startStream` slot free within `START_WITHIN` (the paced client's; the
    replicas' shared bucket where there is one)."""
    if (pacer := pacer_of(client)) is None:
        return None
    return lambda: pacer.claim_in_time("chat.startStream", START_WITHIN)


def _spent(client: AsyncWebClient) -> Callable[[str], bool] | None:
    """A method's bucket is being spent (the paced client's `Pacer.busy`)."""
    pacer = pacer_of(client)
    return pacer.busy if pacer is not None else None


def _stream_busy(client: AsyncWebClient) -> Callable[[], bool] | None:
    """Streams are being spent: more of `chat.startStream`'s burst went in the last seconds than
    one conversation spends (a resumed run's timeline, then its answer)."""
    if (pacer := pacer_of(client)) is None:
        return None
    return lambda: pacer.busy("chat.startStream", beyond=1)


def _post(thread: Thread, text: str) -> OutboxEntry:
    params = {"channel": thread.channel_id, "thread_ts": thread.thread_ts, "text": text}
    late = {**params, "text": _LATE}
    return OutboxEntry(
        "chat.postMessage", params, NOTICE, channel_id=thread.channel_id, meta={"late": late}
    )


def _upload(thread: Thread, filename: str, content: str) -> OutboxEntry:
    params = {
        "channel": thread.channel_id,
        "thread_ts": thread.thread_ts,
        "filename": filename,
        "content": content,
        "title": filename,
    }
    return OutboxEntry(UPLOAD, params, NOTICE, channel_id=thread.channel_id)


_LATE = "_A message for this thread could not be posted: Slack kept asking me to slow down._"


class _QuietSink:
    """A `ThreadReply` whose Slack errors are logged, not raised: the contract of `stream`."""

    def __init__(self, reply: ThreadReply) -> None:
        self._reply = reply
        self.lost = False

    async def append(self, text: str) -> None:
        try:
            await self._reply.append(text)
        except SLACK_ERRORS as exc:
            logger.warning("streaming the answer failed: %s", slack_error(exc))

    async def close(self) -> None:
        try:
            await self._reply.close()
        except SLACK_ERRORS as exc:
            self.lost = True
            logger.warning("finishing the answer failed: %s", slack_error(exc))

    async def finish(
        self, session_id: str, answered: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """The run's final answer: it ends with the feedback buttons."""
        try:
            await self._reply.close(blocks=feedback_blocks(session_id), answered=answered)
        except SLACK_ERRORS as exc:
            self.lost = True
            logger.warning("finishing the answer failed: %s", slack_error(exc))


# Command outputs held for the answer that follows them while the channel's posts are short.
#
# An approved alert costs its card, the card's redraw and one answer. In a storm the command's
# output (the `ToolRan` notice) is shown at the head of the run's next answer instead of as a
# message of its own, whenever the channel's `chat.postMessage` budget (about one a second per
# channel, bursts of 3) is being spent (it is not full: posts went out there in the last few
# seconds, or messages put for its other threads wait to be sent); otherwise it is posted as
# before, at once. Held in memory, per thread: anything else said in the thread, a card, or the
# run's end or pause posts what is held first, so the thread's order is kept. A process killed in
# between loses the held line from the thread (the call's output stays in the audit log, and the
# run is reported cut short).
class HeldOutputs:
    """Rendered outputs (mrkdwn) waiting for their thread's next answer."""

    def __init__(self, short: Callable[[Thread], bool] | None) -> None:
        self.short = short
        """`short(thread)`: the thread's channel's posts are being spent (a storm there)."""
        self._held: dict[tuple[str, str], list[str]] = {}

    def hold(self, thread: Thread, text: str) -> bool:
        """Keep `text` for the thread's next answer when its channel's posts are spent (or
        something is held already: the order holds); False when it is to be posted now."""
        key = (thread.channel_id, thread.thread_ts)
        if key not in self._held and (self.short is None or not self.short(thread)):
            return False
        self._held.setdefault(key, []).append(text)
        return True

    def take(self, thread: Thread) -> str:
        """What is held for the thread (and no longer), one output a line; "" when nothing."""
        return "\n".join(self._held.pop((thread.channel_id, thread.thread_ts), []))
