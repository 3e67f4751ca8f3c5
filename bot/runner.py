"""Drives agent runs for Slack threads: queue, start, stream, pause with cards, decide, resume,
cancel; and what `/opsgate` answers.

Every step that must survive a restart is written to the store before Slack is told about it,
and every step that must happen once is claimed with a conditional update in the store. Runs
start only through the run queue (`bot.dispatcher`), which keeps each channel under its
`concurrency`; resumes after a decision start at once (a human is waiting for them).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import (
    AgentCoreError,
    AgentResponseUpdate,
    Finish,
    FinishReason,
    TextDelta,
    ToolResult,
)

from ._duration import format_duration
from ._streaming import ThreadReply
from ._text import escape_cut, escape_mrkdwn, preformatted, requester_text, user_mention
from .blocks import (
    CardCall,
    CardOutcome,
    ChannelHelp,
    PendingEntry,
    approval_card,
    card_text,
    decided_card,
    decided_text,
    help_text,
    overflow,
    pending_text,
)
from .channels import run_options, session_for
from .deps import Deps
from .dispatcher import Dispatcher
from .policy import GroupResolver, check_approver
from .store import EnqueueOutcome, QueueItem, SessionRow, ToolCallRow, batch_complete

__all__ = ["Runner", "Thread"]

logger = logging.getLogger("opsgate.runner")

OUTPUT_INLINE = 1500
REQUEST_SHOWN_MAX = 3000
"""Longest request text (escaped) that `/opsgate <request>` shows in its thread root."""
_CANCEL = re.compile(r"\s*cancel\s*[.!]?\s*", re.IGNORECASE)
_PERSON = re.compile(r"[UW][A-Z0-9]+")
_FINISH_NOTES = {
    FinishReason.LENGTH: "_(The answer was cut off: the model hit its length limit.)_",
    FinishReason.CONTENT_FILTER: "_(The provider's content filter stopped the answer.)_",
    FinishReason.MAX_ROUNDS: "_(I stopped after the maximum number of tool rounds.)_",
}


@dataclass(frozen=True, slots=True)
class Thread:
    """Where a conversation lives in Slack: one thread is one agent session."""

    team_id: str
    channel_id: str
    thread_ts: str


class Runner:
    """The bot's behaviour, independent of how Slack requests reach it (HTTP or Socket Mode)."""

    def __init__(self, deps: Deps, client: AsyncWebClient) -> None:
        self.deps = deps
        self.client = client
        self.groups = GroupResolver(self._group_members)
        self.dispatcher = Dispatcher(deps.store, deps.policy, self._start_queued)

    async def _group_members(self, group_id: str) -> list[str]:
        response = await self.client.usergroups_users_list(usergroup=group_id)
        return list(response.get("users", []))

    # -- messages ---------------------------------------------------------------------------

    async def owns_thread(self, thread: Thread) -> bool:
        session = await self.deps.store.find_session(
            thread.team_id, thread.channel_id, thread.thread_ts
        )
        return session is not None

    async def on_message(self, thread: Thread, *, user: str, text: str, message_ts: str) -> None:
        """A teammate (or an allow-listed bot, `user` = its id) wrote to the bot: queue a run,
        cancel the thread's paused run, or say why not."""
        store = self.deps.store
        if not self.deps.policy.allows_channel(thread.channel_id):
            await self._say(
                thread,
                "Sorry, I'm not set up to act in this channel. "
                "Ask an admin to add it to `channels` in the OpsGate policy file.",
            )
            await store.audit(
                "refusal",
                actor=user,
                details={"channel": thread.channel_id, "rule": "defaults.channels"},
            )
            return
        if _CANCEL.fullmatch(text):
            await self._cancel_from_message(thread, user=user)
            return
        session = await store.get_or_create_session(
            thread.team_id, thread.channel_id, thread.thread_ts
        )
        outcome = await store.enqueue(session.id, requester=user, text=text, message_ts=message_ts)
        if outcome.item is None:
            await self._busy_reply(thread, outcome)
            return
        await self._dispatch_new(thread, outcome.item)

    async def _dispatch_new(self, thread: Thread, item: QueueItem) -> None:
        """Start the new item if its channel has a free slot; otherwise say it is queued."""
        started = await self.dispatcher.kick(thread.channel_id)
        if any(s.id == item.id for s in started):
            return
        ahead = await self.deps.store.queue_position(item.id)
        if ahead is None:  # another task's kick started it meanwhile
            return
        limit = self.deps.policy.concurrency_for(thread.channel_id)
        text = (
            f":hourglass_flowing_sand: Queued: {limit} run(s) are already going in this channel, "
        )
        text += (
            f"and {ahead} more are waiting ahead of this one. " if ahead else "which is the limit. "
        )
        await self._say(thread, text + "I'll start as soon as a slot frees up.")

    def _start_queued(self, item: QueueItem) -> None:
        """The dispatcher's `start`: the item's run, in the background."""
        self.deps.tasks.spawn(self._run_queued(item), name=f"run {item.session_id}")

    async def _run_queued(self, item: QueueItem) -> None:
        session = await self.deps.store.get_session(item.session_id)
        if session is None:  # cannot happen (the claim joined on it); never hold a slot
            logger.error("queued item %d names no session %r", item.id, item.session_id)
            await self.deps.store.finish_queued(item.id)
            return
        thread = Thread(session.team_id, session.channel_id, session.thread_ts)
        options = run_options(self.deps.policy, self.deps.tools, session.channel_id)
        stream = self.deps.agent.run(
            item.text, session_for(session.id, session.channel_id), options
        )
        await self._drive(
            thread,
            session.id,
            stream,
            requester=item.requester,
            message_ts=item.message_ts,
            item_id=item.id,
        )

    async def _busy_reply(self, thread: Thread, outcome: EnqueueOutcome) -> None:
        session = outcome.session
        if session.state == "awaiting_approval":
            rows = [r for r in await self.deps.store.batch_calls(session.id) if r.needs_approval]
            pending = [r for r in rows if r.status == "pending"]
            links = []
            for row in pending:
                link = await self._permalink(row)
                name = f"`{escape_mrkdwn(row.tool)}`"
                links.append(f"<{link}|{name}>" if link else name)
            await self._say(
                thread,
                "This thread is waiting for a decision on "
                + (", ".join(links) or "the request above")
                + ". Approve or reject it on the card first (or write `cancel` to end the run); "
                "I have not started anything new.",
            )
        elif outcome.waiting is not None:
            await self._say(
                thread,
                "An earlier message in this thread is still queued; I'll answer it first. "
                "Send this one again once I have.",
            )
        else:
            await self._say(
                thread, "I'm still working on the previous request in this thread. One at a time!"
            )

    async def _permalink(self, row: ToolCallRow) -> str | None:
        if not (row.card_channel and row.card_ts):
            return None
        try:
            response = await self.client.chat_getPermalink(
                channel=row.card_channel, message_ts=row.card_ts
            )
        except SlackApiError:
            return None
        link = response.get("permalink")
        return str(link) if link else None

    # -- running ----------------------------------------------------------------------------

    async def _drive(
        self,
        thread: Thread,
        session_id: str,
        stream: AsyncGenerator[AgentResponseUpdate, None],
        *,
        requester: str | None,
        message_ts: str | None,
        item_id: int | None = None,
    ) -> None:
        """Consume one run's stream and show it in the thread; leave the session consistent.

        When it ends (answered, failed or paused) its queue item is done and the channel's next
        queued run may start. Cancelled (the bot is stopping): the session stays `running`, so
        the next start-up's `recover()` tells the thread.
        """
        store = self.deps.store
        if message_ts:
            await self._react(thread, message_ts, "reactions_add")
        reply: ThreadReply | None = None
        final_state: Literal["idle", "failed"] = "idle"
        stopping = False
        try:
            async for update in stream:
                match update:
                    case TextDelta(text=text):
                        if reply is None:
                            reply = self._reply(thread, requester)
                        await reply.append(text)
                    case ToolResult():
                        if reply is not None:
                            await reply.close()
                            reply = None
                        await self._post_tool_result(thread, update)
                    case Finish(finish_reason=FinishReason.AWAITING_APPROVAL):
                        if reply is not None:
                            await reply.close()
                            reply = None
                        # The store already says awaiting_approval; the end of this run
                        # below leaves that state alone.
                        await self._post_cards(thread, session_id)
                    case Finish(finish_reason=FinishReason.ERROR, error=error):
                        if reply is not None:
                            await reply.close()
                            reply = None
                        await self._say(
                            thread,
                            ":warning: I couldn't finish: "
                            + escape_mrkdwn(error or "the model request failed")
                            + "\nYour message is saved: reply in this thread (say, “try again”) "
                            "to continue.",
                        )
                    case Finish(finish_reason=reason):
                        if reply is not None:
                            await reply.close()
                            reply = None
                        if note := _FINISH_NOTES.get(reason):
                            await self._say(thread, note)
                    case _:
                        pass
        except asyncio.CancelledError:
            stopping = True
            raise
        except AgentCoreError as exc:
            logger.warning("run %s refused: %s", session_id, exc)
            await self._say(thread, f":warning: {escape_mrkdwn(str(exc))}")
        except Exception as exc:
            logger.exception("run %s crashed", session_id)
            final_state = "failed"
            await self._say(
                thread,
                f":x: Something went wrong inside OpsGate ({type(exc).__name__}). "
                "The conversation is saved; send a message to try again.",
            )
        finally:
            # Each step on its own: a Slack error here must not keep the session `running`
            # (holding the channel's slot) or skip starting the next queued run.
            await stream.aclose()
            if reply is not None:
                await _quietly(reply.close(), "finishing the answer")
            if not stopping:
                # Only a run still `running` ends here; a paused one stays awaiting_approval.
                await _quietly(store.claim(session_id, ("running",), final_state), "ending the run")
            if message_ts:
                await self._react(thread, message_ts, "reactions_remove")
            if not stopping:
                await self._run_ended(thread, item_id)

    async def _run_ended(self, thread: Thread, item_id: int | None) -> None:
        try:
            if item_id is not None:
                await self.deps.store.finish_queued(item_id)
            await self.dispatcher.kick(thread.channel_id)
        except Exception:
            logger.exception("could not start the next queued run in %s", thread.channel_id)

    def _reply(self, thread: Thread, requester: str | None) -> ThreadReply:
        # Streaming is addressed to a person; an integration's run gets a posted message.
        person = requester if requester and _PERSON.fullmatch(requester) else None
        return ThreadReply(
            self.client,
            channel=thread.channel_id,
            thread_ts=thread.thread_ts,
            recipient_user_id=person,
            recipient_team_id=thread.team_id,
        )

    async def _react(self, thread: Thread, ts: str, method: str) -> None:
        try:
            await getattr(self.client, method)(channel=thread.channel_id, timestamp=ts, name="eyes")
        except SLACK_ERRORS as exc:
            logger.debug("%s failed: %s", method, _slack_error(exc))

    async def _say(self, thread: Thread, text: str) -> None:
        try:
            await self.client.chat_postMessage(
                channel=thread.channel_id, thread_ts=thread.thread_ts, text=text
            )
        except SLACK_ERRORS as exc:
            logger.error("could not post to %s: %s", thread.channel_id, _slack_error(exc))

    async def _tell(self, thread: Thread, user: str, text: str) -> None:
        """An ephemeral reply in the thread that only `user` sees (people only: not bots)."""
        if not _PERSON.fullmatch(user):
            return
        try:
            await self.client.chat_postEphemeral(
                channel=thread.channel_id, user=user, thread_ts=thread.thread_ts, text=text
            )
        except SLACK_ERRORS as exc:
            logger.warning("could not tell %s: %s", user, _slack_error(exc))

    async def _post_tool_result(self, thread: Thread, result: ToolResult) -> None:
        name = escape_mrkdwn(result.name)
        content = result.content
        if content.startswith(("Rejected:", "Expired:")):
            await self._say(
                thread, f":no_entry_sign: `{name}` did not run: {escape_mrkdwn(content)}"
            )
            return
        icon = ":x:" if result.is_error else ":white_check_mark:"
        first_line = content.strip().splitlines()[0] if content.strip() else "(no output)"
        if len(content) <= 200 and "\n" not in content.strip():
            await self._say(thread, f"{icon} `{name}`: {escape_mrkdwn(first_line)}")
            return
        shown, cut = preformatted(content, OUTPUT_INLINE)
        await self._say(thread, f"{icon} `{name}` output:\n{shown}")
        if cut:
            await self._upload(thread, f"{result.name}-{result.call_id}.txt", content)

    async def _upload(self, thread: Thread, filename: str, content: str) -> None:
        try:
            await self.client.files_upload_v2(
                channel=thread.channel_id,
                thread_ts=thread.thread_ts,
                filename=filename,
                content=content,
                title=filename,
            )
        except SLACK_ERRORS as exc:
            logger.warning("file upload failed: %s", _slack_error(exc))

    # -- cards ------------------------------------------------------------------------------

    def _card_call(self, row: ToolCallRow, batch: list[ToolCallRow], channel: str) -> CardCall:
        tool = self.deps.tools.get(row.tool)
        return CardCall(
            ledger_id=row.id,
            tool=row.tool,
            description=tool.description if tool else "",
            arguments=row.arguments_value(),
            digest=row.digest,
            requested_by=row.requested_by,
            held=tuple((r.tool, r.arguments_value()) for r in batch if not r.needs_approval),
            required_approvals=self.deps.policy.required_approvals_for(channel),
            approvals=tuple(row.approvals),
        )

    async def _post_cards(self, thread: Thread, session_id: str) -> None:
        store = self.deps.store
        batch = await store.batch_calls(session_id)
        expires_at = self.deps.clock() + self.deps.policy.ttl
        for row in batch:
            if not row.needs_approval or row.card_ts is not None:
                continue
            if row.expires_at is None:
                await store.set_expiry(row.id, expires_at)
            await self._post_card(thread, row, batch)

    async def _post_card(self, thread: Thread, row: ToolCallRow, batch: list[ToolCallRow]) -> None:
        """Post one card. If Slack refuses, say so in the thread: the call still expires on
        time, `cancel` still works, and the next start-up tries to post it again."""
        card = self._card_call(row, batch, thread.channel_id)
        try:
            response = await self.client.chat_postMessage(
                channel=thread.channel_id,
                thread_ts=thread.thread_ts,
                text=card_text(card),
                blocks=approval_card(card),
            )
        except SLACK_ERRORS as exc:
            logger.error("could not post the card for %s: %s", row.id, _slack_error(exc))
            await self._say(
                thread,
                f":warning: I couldn't post the approval card for `{escape_mrkdwn(row.tool)}` "
                f"({escape_mrkdwn(_slack_error(exc))}). Nothing runs without a decision: the "
                "request expires on its own, or write `cancel` to drop it now.",
            )
            return
        await self.deps.store.set_card(row.id, str(response["channel"]), str(response["ts"]))
        if (full := overflow(card)) is not None:
            await self._upload(thread, f"{row.tool}-{row.call_id}-arguments.txt", full)

    async def refresh_card(self, row: ToolCallRow) -> None:
        """Redraw a card after a decision: no buttons once decided, progress while N-of-M."""
        if not (row.card_channel and row.card_ts):
            return
        store = self.deps.store
        batch = await store.batch_calls(row.session_id)
        card = self._card_call(row, batch, row.card_channel)
        if row.status == "pending":
            blocks = approval_card(card)
            text = card_text(card)
        else:
            status = _card_status(row.status)
            outcome = CardOutcome(
                status=status,
                decided_by=row.decided_by,
                decided_at=row.decided_at or self.deps.clock(),
                # "cancelled by <@U>" is what the card says already; the reason would repeat it.
                reason=None if status == "cancelled" else row.reason,
            )
            blocks = decided_card(card, outcome)
            text = decided_text(card, outcome)
        try:
            await self.client.chat_update(
                channel=row.card_channel, ts=row.card_ts, text=text, blocks=blocks
            )
        except SLACK_ERRORS as exc:
            logger.warning("could not update card %s: %s", row.id, _slack_error(exc))

    # -- decisions --------------------------------------------------------------------------

    async def check_clicker(
        self, row: ToolCallRow, *, user: str, channel: str, team: str | None = None
    ) -> tuple[bool, str | None, str]:
        session = await self.deps.store.get_session(row.session_id) if team else None
        check = await check_approver(
            self.deps.policy,
            channel=channel,
            user_id=user,
            requester=row.requested_by,
            groups=self.groups,
            user_team=team,
            home_team=session.team_id if session else None,
        )
        return check.allowed, check.why, check.rule

    async def decide(
        self,
        ledger_id: str,
        decision: Literal["approved", "rejected"],
        *,
        user: str,
        team: str | None,
        reason: str | None = None,
    ) -> str | None:
        """Record a click. Returns a message for the clicker alone when nothing changed."""
        store = self.deps.store
        row = await store.get_call(ledger_id)
        if row is None:
            await store.audit(
                "refusal", actor=user, details={"reason": "unknown approval id", "id": ledger_id}
            )
            return "I don't know this approval request (it may belong to another OpsGate install)."
        session = await store.get_session(row.session_id)
        channel = session.channel_id if session else (row.card_channel or "")
        if decision == "rejected" and user == row.requested_by:
            # Withdrawing your own request is always allowed; approving it is not.
            allowed, why, rule = True, None, "the requester may reject their own request"
        else:
            allowed, why, rule = await self.check_clicker(
                row, user=user, channel=channel, team=team
            )
        if not allowed:
            await store.audit(
                "refusal",
                actor=user,
                session_id=row.session_id,
                call_id=row.call_id,
                details={"reason": why, "rule": rule, "decision": decision},
            )
            return why or "You may not decide on this request."
        outcome = await store.decide(
            ledger_id,
            decision,
            user_id=user,
            team_id=team,
            reason=reason,
            required_approvals=self.deps.policy.required_approvals_for(channel),
            rule=rule,
        )
        if not outcome.recorded:
            if outcome.row.status != row.status:
                # The click found the call past its deadline and expired it: show that, and
                # resume if that was the batch's last open call.
                await self.refresh_card(outcome.row)
                await self.maybe_resume(row.session_id)
            return outcome.why or "This request was already decided."
        await self.refresh_card(outcome.row)
        await self.maybe_resume(row.session_id)
        return None

    async def maybe_resume(self, session_id: str) -> bool:
        """Resume the paused run once every gated call is decided; exactly one caller does."""
        store = self.deps.store
        if self.deps.tasks.closed:
            return False  # shutting down: the next start-up resumes it
        batch = await store.batch_calls(session_id)
        if not batch or not batch_complete(batch):
            return False
        if not await store.claim(session_id, ("awaiting_approval",), "resuming"):
            return False
        session = await store.get_session(session_id)
        assert session is not None
        thread = Thread(session.team_id, session.channel_id, session.thread_ts)
        responses = await store.responses_for_batch(session_id, mention=user_mention)
        await store.set_state(session_id, "running")
        # The same tools as the run that paused: a stored call must not become "unknown".
        options = run_options(self.deps.policy, self.deps.tools, session.channel_id, responses)
        stream = self.deps.agent.run(None, session_for(session_id, session.channel_id), options)
        # Progress shows on the first card while the approved calls run.
        card_ts = next((r.card_ts for r in batch if r.needs_approval and r.card_ts), None)
        self.deps.tasks.spawn(
            self._drive(
                thread, session_id, stream, requester=session.requester, message_ts=card_ts
            ),
            name=f"resume {session_id}",
        )
        return True

    async def expire_due(self) -> int:
        """Remind about calls that expire soon; expire those past their time limit, redraw their
        cards and resume their runs."""
        if (before := self.deps.policy.remind_before) is not None:
            for row in await self.deps.store.due_reminders(before, self.deps.clock()):
                await self._remind(row)
        expired = await self.deps.store.expire_due(self.deps.clock())
        for row in expired:
            await self.refresh_card(row)
        for session_id in {row.session_id for row in expired}:
            await self.maybe_resume(session_id)
        return len(expired)

    async def _remind(self, row: ToolCallRow) -> None:
        session = await self.deps.store.get_session(row.session_id)
        if session is None or row.expires_at is None:
            return
        thread = Thread(session.team_id, session.channel_id, session.thread_ts)
        link = await self._permalink(row)
        name = f"`{escape_mrkdwn(row.name)}`"
        when = f"<!date^{int(row.expires_at.timestamp())}^{{time}}|{row.expires_at:%H:%M} UTC>"
        await self._say(
            thread,
            f":alarm_clock: {f'<{link}|{name}>' if link else name} still waits for a decision; "
            f"it expires at {when} and will then not run.",
        )

    async def announce_recovery(self) -> None:
        """After a restart: requeue runs that had not begun, tell each thread whose run was cut
        short what happened, and start what was queued before the restart."""
        requeued = await self.deps.store.requeue_interrupted()
        if requeued:
            logger.info("requeued %d run(s) that had not begun before the restart", len(requeued))
        for recovered in await self.deps.store.recover():
            session = recovered.session
            thread = Thread(session.team_id, session.channel_id, session.thread_ts)
            if recovered.interrupted:
                names = ", ".join(f"`{escape_mrkdwn(r.tool)}`" for r in recovered.interrupted)
                text = (
                    f":warning: OpsGate restarted while {names} was running. Its outcome is "
                    "unknown and it was not run again; check the system before retrying."
                )
            else:
                text = ":warning: OpsGate restarted during this run. Send a message to continue."
            await self._say(thread, text)
        await self._repost_missing_cards()
        for session in await self.deps.store.sessions_awaiting_approval():
            await self.maybe_resume(session.id)  # decided, but the resume was never claimed
        await self.dispatcher.kick_all()

    async def _repost_missing_cards(self) -> None:
        """A card whose post failed (or that a crash kept from being posted) gets another try,
        so every waiting call has its buttons."""
        for pending in await self.deps.store.pending_approvals():
            if pending.call.card_ts is not None:
                continue
            session = pending.session
            thread = Thread(session.team_id, session.channel_id, session.thread_ts)
            batch = await self.deps.store.batch_calls(session.id)
            if pending.call.expires_at is None:
                await self.deps.store.set_expiry(
                    pending.call.id, self.deps.clock() + self.deps.policy.ttl
                )
            await self._post_card(thread, pending.call, batch)

    # -- cancel -----------------------------------------------------------------------------

    async def _may_cancel(
        self, session: SessionRow, user: str, team: str | None = None
    ) -> tuple[bool, str | None, str]:
        """The requester may always cancel their run; otherwise whoever may approve there."""
        if session.requester is not None and user == session.requester:
            return True, None, "the requester may cancel their own run"
        check = await check_approver(
            self.deps.policy,
            channel=session.channel_id,
            user_id=user,
            requester=session.requester,
            groups=self.groups,
            user_team=team,
            home_team=session.team_id,
        )
        if check.allowed:
            return True, None, check.rule
        spec = self.deps.policy.approvers_for(session.channel_id)
        asked = requester_text(session.requester) if session.requester else "the requester"
        why = f"Only {asked} or {spec.mention_text()} may cancel this run."
        if check.why and "could not be looked up" in check.why:
            why += " (The approvers' user groups could not be looked up just now; try again.)"
        return False, why, check.rule

    async def cancel(
        self,
        session: SessionRow,
        *,
        user: str,
        team: str | None = None,
        via: Literal["message", "button"],
        batch_id: str | None = None,
    ) -> str | None:
        """Cancel the session's run waiting for approval. Returns a message for `user` alone
        when nothing was cancelled (not allowed, or the run resumed first)."""
        store = self.deps.store
        allowed, why, rule = await self._may_cancel(session, user, team)
        if not allowed:
            await store.audit(
                "refusal",
                actor=user,
                session_id=session.id,
                details={"action": "cancel", "via": via, "why": why, "rule": rule},
            )
            return why
        outcome = await store.cancel_batch(
            session.id, user_id=user, batch_id=batch_id, team_id=team, via=via, rule=rule
        )
        if not outcome.cancelled:
            return f"Nothing was cancelled: {outcome.why}."
        for row in outcome.rows:
            if row.needs_approval and row.status == "cancelled":
                await self.refresh_card(row)
        thread = Thread(session.team_id, session.channel_id, session.thread_ts)
        await self._say(
            thread,
            f":no_entry_sign: Run cancelled by {user_mention(user)}. Nothing of the request "
            "above was run. Send a new message to start again.",
        )
        return None

    async def cancel_from_card(self, ledger_id: str, *, user: str, team: str | None) -> str | None:
        """A "Cancel run" click. Returns a message for the clicker alone when nothing changed."""
        store = self.deps.store
        row = await store.get_call(ledger_id)
        session = None if row is None else await store.get_session(row.session_id)
        if row is None or session is None:
            await store.audit(
                "refusal", actor=user, details={"reason": "unknown approval id", "id": ledger_id}
            )
            return "I don't know this approval request (it may belong to another OpsGate install)."
        return await self.cancel(session, user=user, team=team, via="button", batch_id=row.batch_id)

    async def _cancel_from_message(self, thread: Thread, *, user: str) -> None:
        """`cancel` written in a thread: the paused run, or the queued message, is withdrawn."""
        store = self.deps.store
        session = await store.find_session(thread.team_id, thread.channel_id, thread.thread_ts)
        if session is not None and session.state == "awaiting_approval":
            refusal = await self.cancel(session, user=user, via="message")
            if refusal:
                await self._tell(thread, user, refusal)
            return
        queued = None if session is None else await store.queued_item(session.id)
        if session is not None and queued is not None:
            allowed, why, _ = await self._may_cancel(
                session.model_copy(update={"requester": queued.requester}), user
            )
            if not allowed:
                await self._tell(thread, user, why or "You may not cancel this request.")
                return
            if await store.cancel_queued(session.id, user_id=user) is not None:
                await self._say(
                    thread,
                    f":no_entry_sign: Cancelled by {user_mention(user)} before it started.",
                )
            return
        await self._tell(
            thread,
            user,
            "There is nothing to cancel here: `cancel` ends a run while it waits for approval.",
        )

    # -- /opsgate ---------------------------------------------------------------------------

    async def slash_request(self, *, team: str, channel: str, user: str, text: str) -> str | None:
        """`/opsgate <request>`: post the request as a thread root and queue a run in that
        thread for `user`. Returns a message for `user` alone when that was not possible."""
        if not self.deps.policy.allows_channel(channel):
            await self.deps.store.audit(
                "refusal",
                actor=user,
                details={"channel": channel, "rule": "defaults.channels", "via": "slash"},
            )
            return (
                "Sorry, I'm not set up to act in this channel. "
                "Ask an admin to add it to `channels` in the OpsGate policy file."
            )
        try:
            posted = await self.client.chat_postMessage(
                channel=channel,
                text=f"{user_mention(user)} asked: {escape_cut(text, REQUEST_SHOWN_MAX)}",
            )
        except SlackApiError as exc:
            error = exc.response.get("error")
            return (
                f"I couldn't post in this channel ({escape_mrkdwn(str(error))}). "
                "Invite me first (`/invite @OpsGate`), or use a channel I'm in."
            )
        thread = Thread(team, str(posted["channel"]), str(posted["ts"]))
        session = await self.deps.store.get_or_create_session(
            thread.team_id, thread.channel_id, thread.thread_ts
        )
        outcome = await self.deps.store.enqueue(
            session.id, requester=user, text=text, message_ts=thread.thread_ts
        )
        if outcome.item is None:  # a brand-new thread is never busy; be safe anyway
            await self._busy_reply(thread, outcome)
            return None
        await self._dispatch_new(thread, outcome.item)
        return None

    async def pending_for(self, user: str, *, channel: str, team: str | None = None) -> str:
        """`/opsgate pending`: the approvals `user` may decide now, each linked to its card.

        Where the policy lets anyone in a channel approve, only the channel the command was
        run in is listed: channel membership is not checked here, so other channels' requests
        are not shown to people who may not be in them.
        """
        policy = self.deps.policy
        now = self.deps.clock()
        entries: list[PendingEntry] = []
        for pending in await self.deps.store.pending_approvals():
            row, where = pending.call, pending.session.channel_id
            if policy.approvers_for(where).anyone and where != channel:
                continue
            if user in row.approvals or (row.expires_at is not None and row.expires_at <= now):
                continue
            check = await check_approver(
                policy,
                channel=where,
                user_id=user,
                requester=row.requested_by,
                groups=self.groups,
                user_team=team,
                home_team=pending.session.team_id,
            )
            if not check.allowed:
                continue
            entries.append(
                PendingEntry(
                    tool=row.tool,
                    channel=where,
                    requested_by=row.requested_by,
                    permalink=await self._permalink(row),
                    expires_at=row.expires_at,
                    approvals=len(row.approvals),
                    required_approvals=policy.required_approvals_for(where),
                )
            )
        return pending_text(entries)

    def help_for(self, channel: str) -> str:
        """`/opsgate help`: usage, and the policy of `channel`."""
        policy = self.deps.policy
        names = policy.tools_for(channel)
        offered = (
            [self.deps.tools[n] for n in names if n in self.deps.tools]
            if names is not None
            else list(self.deps.tools.values())
        )
        return help_text(
            ChannelHelp(
                channel=channel,
                acts_here=policy.allows_channel(channel),
                trigger=policy.trigger_for(channel),
                allowed_bots=policy.channel(channel).allowed_bots,
                approvers=policy.approvers_for(channel).mention_text(),
                required_approvals=policy.required_approvals_for(channel),
                allow_self_approval=policy.allow_self_approval,
                ttl=format_duration(policy.ttl),
                tools=tuple((t.name, policy.approval_summary(t)) for t in offered),
                concurrency=policy.concurrency_for(channel),
                has_instructions=policy.instructions_for(channel) is not None,
                policy_source=policy.source,
            )
        )


SLACK_ERRORS = (SlackClientError, aiohttp.ClientError, TimeoutError)
"""What a Web API call can raise once slack_sdk's retries are spent."""


def _slack_error(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error"))
    return f"{type(exc).__name__}: {exc}"


async def _quietly(step: Awaitable[Any], what: str) -> None:
    """Run a clean-up step; log (don't raise) if it fails, so the next step still runs."""
    try:
        await step
    except Exception:
        logger.exception("%s failed", what)


def _card_status(status: str) -> Literal["approved", "rejected", "expired", "cancelled"]:
    match status:
        case "rejected" | "expired" | "cancelled":
            return status
        case _:
            return "approved"
