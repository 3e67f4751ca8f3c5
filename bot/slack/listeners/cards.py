"""Clicks on approval cards and on the Home tab's copies of their buttons: Approve, Reject,
Cancel run, Edit, "Allow for <duration>", Re-run preview, Break glass, Mark reviewed, and the
modals they open (the reject reason, the edit form, the Allow dialog where the granter chooses
a shape, the break-glass reason); and the feedback buttons under a final answer, with the
"what was wrong?" modal a "bad" click opens.

Each listener acknowledges before any slow work, reads the payload (`bot.slack.ids`),
makes one call of the run service with the `Click` and renders the `Answer` it gets back: the
notice for the clicker alone in the card's thread, the Home tabs to republish, the form to
open with the click's `trigger_id` (which Slack honours for 3 seconds only).
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck

from ...runs.clicks import Answer, GlassForm, RejectForm
from ...runs.output import PostFailed
from ...runs.service import RunService
from ...runs.views import AllowForm, EditForm
from ..feedback import feedback_click, feedback_modal, feedback_reason
from ..freezes import break_glass_modal, glass_reason
from ..ids import BLOCK_GLASS_REASON, click_of, clicker, submitted, trigger_of
from ..modals import allow_choice, edit_values, reason_from_view
from ..mrkdwn import escape_mrkdwn
from ..output import SlackThreadOutput

__all__ = ["CardClicks", "FeedbackClicks", "render"]

ux_logger = logging.getLogger("opsgate.slack.ux")


async def render(output: SlackThreadOutput, user: str, answer: Answer) -> None:
    """An answer shown: its notice for `user` alone in its thread, then the Home tabs owed
    (each drawn when it is sent, once per burst: `bot.slack.home`)."""
    if answer.notice is not None and answer.thread is not None:
        await output.tell(answer.thread, user, answer.notice)
    for tab in answer.homes:
        await output.replies.owe_home(tab.user_id, tab.team_id)


class CardClicks:
    """The card buttons, then the modals they open."""

    def __init__(self, service: RunService, output: SlackThreadOutput) -> None:
        self.service = service
        self.output = output

    async def approve(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        await render(self.output, click.user, await self.service.approve(click))

    async def reject(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        answer = await self.service.reject_form(click)
        await render(self.output, click.user, answer)
        if not isinstance(answer.form, RejectForm):
            return
        form = answer.form
        failed = await self.output.replies.open_reject_form(
            trigger_of(body), form.ledger_id, form.reasons
        )
        if isinstance(failed, PostFailed) and click.thread is not None:
            await self.output.replies.tell_mrkdwn(
                click.thread,
                click.user,
                f"I couldn't open the rejection form ({escape_mrkdwn(failed.error)}); "
                "click Reject again.",
            )

    async def cancel(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        await render(self.output, click.user, await self.service.cancel_run(click))

    async def rerun_preview(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        await render(self.output, click.user, await self.service.rerun_preview(click))

    async def edit(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        answer = await self.service.edit_form(click)
        await render(self.output, click.user, answer)
        if not isinstance(answer.form, EditForm):
            return
        failed = await self.output.replies.open_edit_form(trigger_of(body), answer.form)
        if failed is not None:
            ux_logger.warning("could not open the edit form: %s", failed.error)
            if answer.thread is not None:  # the clicker must not be left waiting for a form
                await self.output.replies.tell_mrkdwn(
                    answer.thread,
                    click.user,
                    f"I couldn't open the edit form ({escape_mrkdwn(failed.error)}); "
                    "click Edit again, or approve or reject the call as it is.",
                )

    async def allow(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        answer = await self.service.allow(click)
        await render(self.output, click.user, answer)
        if isinstance(answer.form, AllowForm):  # shapes to choose from: the dialog decides
            failed = await self.output.replies.open_allow_form(trigger_of(body), answer.form)
            if failed is not None:
                ux_logger.warning("could not open the allow dialog: %s", failed.error)

    async def break_glass(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        answer = await self.service.glass_form(click)
        await render(self.output, click.user, answer)
        if not isinstance(answer.form, GlassForm):
            return
        view = break_glass_modal(answer.form.ledger_id, answer.form.digest)
        failed = await self.output.replies.open_view(trigger_of(body), view)
        if isinstance(failed, PostFailed) and click.thread is not None:
            await self.output.replies.tell_mrkdwn(
                click.thread, click.user, "I couldn't open the break-glass form; click again."
            )

    async def reviewed(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        await render(self.output, click.user, await self.service.review(click))

    # -- the modals -------------------------------------------------------------------------

    async def edit_submitted(
        self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        # Acknowledged whatever happens: a modal left without its ack shows Slack's error.
        click = submitted(body, str(view.get("private_metadata") or ""))
        answer = await self.service.submit_edit(click, edit_values(view))
        if answer.errors is not None:
            await ack(response_action="errors", errors=answer.errors.errors)
            return
        await ack()
        await render(self.output, click.user, answer)

    async def reject_submitted(
        self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        await ack()
        click = submitted(body, str(view.get("private_metadata") or ""))
        answer = await self.service.reject(click, reason_from_view(view))
        await render(self.output, click.user, answer)

    async def allow_submitted(
        self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        await ack()
        ledger_id, digest, choice = allow_choice(view)
        click = submitted(body, ledger_id, digest)
        await render(self.output, click.user, await self.service.allow_chosen(click, choice))

    async def glass_submitted(
        self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        ledger_id, digest, reason = glass_reason(view)
        if not reason:
            await ack(response_action="errors", errors={BLOCK_GLASS_REASON: "A reason is needed."})
            return
        await ack()
        click = submitted(body, ledger_id, digest)
        await render(self.output, click.user, await self.service.break_glass(click, reason))


# -- feedback on a final answer ----------------------------------------------------------------
# The feedback buttons under a final answer, and the "what was wrong?" modal a "bad" click
# opens. Acknowledged first; the click is asked of the one gate and recorded
# (`RunService.rate`: one read and one write), then the modal opens (its `trigger_id` lasts
# 3 seconds). A refused click (one that hides its workspace) opens nothing and is told why.


feedback_logger = logging.getLogger("opsgate.slack.feedback")


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
            feedback_logger.warning("a feedback click without its session or value; ignored")
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
                feedback_logger.info("could not open the feedback modal: %s", failed.error)

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
