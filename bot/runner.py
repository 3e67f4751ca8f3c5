"""Drives agent runs for Slack threads: start, stream, pause with cards, decide, resume.

Every step that must survive a restart is written to the store before Slack is told about it,
and every step that must happen once is claimed with a conditional update in the store.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import (
    AgentCoreError,
    AgentResponseUpdate,
    AgentRunOptions,
    AgentSession,
    Finish,
    FinishReason,
    TextDelta,
    ToolResult,
)

from ._streaming import ThreadReply
from ._text import escape_mrkdwn, preformatted
from .blocks import CardCall, CardOutcome, approval_card, card_text, decided_card, overflow
from .deps import Deps
from .policy import GroupResolver, check_approver
from .store import ToolCallRow, batch_complete

__all__ = ["Runner", "Thread"]

logger = logging.getLogger("opsgate.runner")

OUTPUT_INLINE = 1500
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
        """A teammate wrote to the bot. Start a run, or say why not."""
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
        session = await store.get_or_create_session(
            thread.team_id, thread.channel_id, thread.thread_ts
        )
        if not await store.claim(session.id, ("idle", "failed"), "running"):
            await self._busy_reply(thread, session.id)
            return
        await store.set_requester(session.id, user)
        stream = self.deps.agent.run(text, AgentSession(session.id))
        self.deps.tasks.spawn(
            self._drive(thread, session.id, stream, requester=user, message_ts=message_ts),
            name=f"run {session.id}",
        )

    async def _busy_reply(self, thread: Thread, session_id: str) -> None:
        session = await self.deps.store.get_session(session_id)
        if session is not None and session.state == "awaiting_approval":
            rows = [r for r in await self.deps.store.batch_calls(session_id) if r.needs_approval]
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
                + ". Approve or reject it on the card first; I have not started anything new.",
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
        stream: AsyncIterator[AgentResponseUpdate],
        *,
        requester: str | None,
        message_ts: str | None,
    ) -> None:
        """Consume one run's stream and show it in the thread; leave the session consistent."""
        store = self.deps.store
        if message_ts:
            await self._react(thread, message_ts, "reactions_add")
        reply: ThreadReply | None = None
        final_state: Literal["idle", "failed"] | None = "idle"
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
                        final_state = None  # the store already says awaiting_approval
                        await self._post_cards(thread, session_id)
                    case Finish(finish_reason=FinishReason.ERROR, error=error):
                        if reply is not None:
                            await reply.close()
                            reply = None
                        await self._say(
                            thread,
                            ":warning: I couldn't finish: "
                            + escape_mrkdwn(error or "the model request failed")
                            + "\nNothing was lost; send your message again to retry.",
                        )
                    case Finish(finish_reason=reason):
                        if reply is not None:
                            await reply.close()
                            reply = None
                        if note := _FINISH_NOTES.get(reason):
                            await self._say(thread, note)
                    case _:
                        pass
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
            if reply is not None:
                await reply.close()
            if final_state is not None:
                await store.set_state(session_id, final_state)
            if message_ts:
                await self._react(thread, message_ts, "reactions_remove")

    def _reply(self, thread: Thread, requester: str | None) -> ThreadReply:
        return ThreadReply(
            self.client,
            channel=thread.channel_id,
            thread_ts=thread.thread_ts,
            recipient_user_id=requester,
            recipient_team_id=thread.team_id,
        )

    async def _react(self, thread: Thread, ts: str, method: str) -> None:
        try:
            await getattr(self.client, method)(channel=thread.channel_id, timestamp=ts, name="eyes")
        except SlackApiError as exc:
            logger.debug("%s failed: %s", method, exc.response.get("error"))

    async def _say(self, thread: Thread, text: str) -> None:
        try:
            await self.client.chat_postMessage(
                channel=thread.channel_id, thread_ts=thread.thread_ts, text=text
            )
        except SlackApiError as exc:
            logger.error("could not post to %s: %s", thread.channel_id, exc.response.get("error"))

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
        except SlackApiError as exc:
            logger.warning("file upload failed: %s", exc.response.get("error"))

    # -- cards ------------------------------------------------------------------------------

    def _card_call(self, row: ToolCallRow, batch: list[ToolCallRow], channel: str) -> CardCall:
        tool = self.deps.tools.get(row.tool)
        return CardCall(
            ledger_id=row.id,
            tool=row.tool,
            description=tool.description if tool else "",
            arguments=_loads(row.arguments),
            digest=row.digest,
            requested_by=row.requested_by,
            held=tuple((r.tool, _loads(r.arguments)) for r in batch if not r.needs_approval),
            required_approvals=self.deps.policy.required_approvals_for(channel),
            approvals=tuple(row.approvals),
        )

    async def _post_cards(self, thread: Thread, session_id: str) -> None:
        store = self.deps.store
        batch = await store.batch_calls(session_id)
        expires_at = self.deps.clock() + self.deps.policy.ttl
        for row in batch:
            if not row.needs_approval:
                continue
            card = self._card_call(row, batch, thread.channel_id)
            await store.set_expiry(row.id, expires_at)
            response = await self.client.chat_postMessage(
                channel=thread.channel_id,
                thread_ts=thread.thread_ts,
                text=card_text(card),
                blocks=approval_card(card),
            )
            await store.set_card(row.id, str(response["channel"]), str(response["ts"]))
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
        else:
            outcome = CardOutcome(
                status=_card_status(row.status),
                decided_by=row.decided_by,
                decided_at=row.decided_at or self.deps.clock(),
                reason=row.reason,
            )
            blocks = decided_card(card, outcome)
        try:
            await self.client.chat_update(
                channel=row.card_channel, ts=row.card_ts, text=card_text(card), blocks=blocks
            )
        except SlackApiError as exc:
            logger.warning("could not update card %s: %s", row.id, exc.response.get("error"))

    # -- decisions --------------------------------------------------------------------------

    async def check_clicker(
        self, row: ToolCallRow, *, user: str, channel: str
    ) -> tuple[bool, str | None, str]:
        check = await check_approver(
            self.deps.policy,
            channel=channel,
            user_id=user,
            requester=row.requested_by,
            groups=self.groups,
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
            allowed, why, rule = await self.check_clicker(row, user=user, channel=channel)
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
            return outcome.why or "This request was already decided."
        await self.refresh_card(outcome.row)
        await self.maybe_resume(row.session_id)
        return None

    async def maybe_resume(self, session_id: str) -> bool:
        """Resume the paused run once every gated call is decided; exactly one caller does."""
        store = self.deps.store
        batch = await store.batch_calls(session_id)
        if not batch or not batch_complete(batch):
            return False
        if not await store.claim(session_id, ("awaiting_approval",), "resuming"):
            return False
        session = await store.get_session(session_id)
        assert session is not None
        thread = Thread(session.team_id, session.channel_id, session.thread_ts)
        responses = await store.responses_for_batch(session_id)
        await store.set_state(session_id, "running")
        options = AgentRunOptions().with_tool_approval_responses(responses)
        stream = self.deps.agent.run(None, AgentSession(session_id), options)
        self.deps.tasks.spawn(
            self._drive(thread, session_id, stream, requester=session.requester, message_ts=None),
            name=f"resume {session_id}",
        )
        return True

    async def expire_due(self) -> int:
        """Expire undecided calls past their time limit, redraw their cards, resume the runs."""
        expired = await self.deps.store.expire_due(self.deps.clock())
        for row in expired:
            await self.refresh_card(row)
        for session_id in {row.session_id for row in expired}:
            await self.maybe_resume(session_id)
        return len(expired)

    async def announce_recovery(self) -> None:
        """After a restart, tell each thread whose run was cut short what happened."""
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


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _card_status(status: str) -> Literal["approved", "rejected", "expired", "cancelled"]:
    match status:
        case "rejected" | "expired" | "cancelled":
            return status
        case _:
            return "approved"
