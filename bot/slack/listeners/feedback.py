"""The feedback buttons under a final answer, and the "what was wrong?" modal a "bad" click
opens. Acknowledged first; the click is asked of the one gate and recorded
(`RunService.feedback`: one read and one write), then the modal opens (its `trigger_id` lasts
3 seconds). A refused click (one that hides its workspace) opens nothing and is told why."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp

from ...runs.notices import Notice, UnknownRequest
from ...runs.service import RunService
from ..feedback import feedback_click, feedback_modal, feedback_reason
from ..ids import ACTION_FEEDBACK, CALLBACK_FEEDBACK
from ..output import SlackThreadOutput

__all__ = ["register"]

logger = logging.getLogger("opsgate.slack.feedback")


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    @app.action(ACTION_FEEDBACK)
    async def on_feedback(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        user = str((body.get("user") or {}).get("id") or "")
        message = body.get("message") or {}
        ts = str(message.get("ts") or (body.get("container") or {}).get("message_ts") or "")
        actions = body.get("actions") or [{}]
        click = feedback_click(actions[0], ts) if isinstance(actions[0], dict) else None
        if click is None or not user:
            logger.warning("a feedback click without its session or value; ignored")
            return
        team = (body.get("user") or {}).get("team_id") or (body.get("team") or {}).get("id")
        notice = await service.feedback.give(
            click.session_id,
            user=user,
            team=str(team) if team else None,
            value=click.value,
            message_ts=click.message_ts,
        )
        if isinstance(notice, UnknownRequest):
            logger.info("feedback on unknown session %s ignored", click.session_id)
            return
        if notice is not None:
            await _tell(service, output, click.session_id, user, notice)
            return
        if click.value == "bad" and (trigger := body.get("trigger_id")):
            failed = await output.replies.open_view(str(trigger), feedback_modal(click))
            if failed is not None:
                logger.info("could not open the feedback modal: %s", failed.error)

    @app.view(CALLBACK_FEEDBACK)
    async def on_feedback_reason(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        user = str((body.get("user") or {}).get("id") or "")
        read = feedback_reason(view)
        if read is None or not user:
            return
        session_id, ts, reason = read
        team = (body.get("user") or {}).get("team_id") or (body.get("team") or {}).get("id")
        notice = await service.feedback.explain(
            session_id, user=user, team=str(team) if team else None, message_ts=ts, reason=reason
        )
        if notice is not None and not isinstance(notice, UnknownRequest):
            await _tell(service, output, session_id, user, notice)


async def _tell(
    service: RunService, output: SlackThreadOutput, session_id: str, user: str, notice: Notice
) -> None:
    """`notice` for `user` alone, in the thread of the answer."""
    thread = await service.feedback.thread(session_id)
    if thread is not None:
        await output.tell(thread, user, notice)
