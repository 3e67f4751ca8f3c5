"""The feedback buttons under a final answer, and the "what was wrong?" modal a "bad" click
opens. Acknowledged first; the modal opens at once (its `trigger_id` lasts 3 seconds), then the
click is recorded (`RunService.feedback`)."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp

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
        if click.value == "bad" and (trigger := body.get("trigger_id")):
            failed = await output.replies.open_view(str(trigger), feedback_modal(click))
            if failed is not None:
                logger.info("could not open the feedback modal: %s", failed.error)
        recorded = await service.feedback.give(
            click.session_id, user=user, value=click.value, message_ts=click.message_ts
        )
        if not recorded:
            logger.info("feedback on unknown session %s ignored", click.session_id)

    @app.view(CALLBACK_FEEDBACK)
    async def on_feedback_reason(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        user = str((body.get("user") or {}).get("id") or "")
        read = feedback_reason(view)
        if read is None or not user:
            return
        session_id, ts, reason = read
        await service.feedback.explain(session_id, user=user, message_ts=ts, reason=reason)
