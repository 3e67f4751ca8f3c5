"""The feedback buttons under a final answer, and the "what was wrong?" modal a "bad" click
opens. Acknowledged first; the click is asked of the one gate and recorded
(`RunService.rate`: one read and one write), then the modal opens (its `trigger_id` lasts
3 seconds). A refused click (one that hides its workspace) opens nothing and is told why."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck

from ...runs.service import RunService
from ..feedback import feedback_click, feedback_modal, feedback_reason
from ..output import SlackThreadOutput
from ..payloads import clicker, trigger_of
from .cards import render

__all__ = ["FeedbackClicks"]

logger = logging.getLogger("opsgate.slack.feedback")


class FeedbackClicks:
    """Good, bad, and why bad."""

    def __init__(self, service: RunService, output: SlackThreadOutput) -> None:
        self.service = service
        self.output = output

    async def rate(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        user, team = clicker(body)
        message = body.get("message") or {}
        ts = str(message.get("ts") or (body.get("container") or {}).get("message_ts") or "")
        actions = body.get("actions") or [{}]
        click = feedback_click(actions[0], ts) if isinstance(actions[0], dict) else None
        if click is None or not user:
            logger.warning("a feedback click without its session or value; ignored")
            return
        answer = await self.service.rate(
            click.session_id, user=user, team=team, value=click.value, message_ts=click.message_ts
        )
        if answer.notice is not None:  # refused, or an unknown session: no modal
            await render(self.output, user, answer)
            return
        if click.value == "bad" and (trigger := trigger_of(body)):
            failed = await self.output.replies.open_view(trigger, feedback_modal(click))
            if failed is not None:
                logger.info("could not open the feedback modal: %s", failed.error)

    async def reason(self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        user, team = clicker(body)
        read = feedback_reason(view)
        if read is None or not user:
            return
        session_id, ts, reason = read
        answer = await self.service.explain(
            session_id, user=user, team=team, message_ts=ts, reason=reason
        )
        await render(self.output, user, answer)
