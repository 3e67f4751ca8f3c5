"""Clicks on approval cards and on the Home tab's copies of their buttons: Approve, Reject,
Cancel run, Edit, "Allow for <duration>", Re-run preview, Break glass, Mark reviewed, and the
modals they open (the reject reason, the edit form, the Allow dialog where the granter chooses
a shape, the break-glass reason); the feedback buttons under a final answer, with the "what was
wrong?" modal a "bad" click opens; and the review card of a changed MCP tool, which is posted
at start-up (`post_reviews`) and answered by its own two buttons (`McpReview`).

Each listener acknowledges before any slow work, reads the payload (`bot.slack.ids`),
makes one call of the run service with the `Click` and renders the `Answer` it gets back: the
notice for the clicker alone in the card's thread, the Home tabs to republish, the form to
open with the click's `trigger_id` (which Slack honours for 3 seconds only).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt.async_app import AsyncAck
from slack_sdk.web.async_client import AsyncWebClient

from ...approvals import Refused
from ...policy import Policy
from ...runs.clicks import Answer, GlassForm, RejectForm
from ...runs.output import PostFailed
from ...runs.service import RunService
from ...runs.tool_pins import ToolReview
from ...runs.views import AllowForm, EditForm
from ...store import McpPin, OutboxEntry, Store
from ...tools.mcp_tool import ToolDefinition, changed_fields
from ..answers import refusal_text
from ..freezes import break_glass_modal, glass_reason
from ..ids import BLOCK_GLASS_REASON, click_of, clicker, submitted, trigger_of
from ..modals import (
    allow_choice,
    edit_values,
    feedback_click,
    feedback_modal,
    feedback_reason,
    reason_from_view,
)
from ..mrkdwn import escape_mrkdwn
from ..output import SlackThreadOutput

__all__ = [
    "ACTION_MCP_ACCEPT",
    "ACTION_MCP_KEEP",
    "CardClicks",
    "FeedbackClicks",
    "McpReview",
    "mcp_review_blocks",
    "post_reviews",
    "render",
]

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


# -- the review card of a changed MCP tool -----------------------------------------------------
# The review card of a changed MCP tool, and its two buttons.
#
# At start-up every quarantined tool (`bot.runs.tool_pins`) gets one card in `[mcp]
# review_channel`, once per listed definition across restarts and replicas (its key is claimed
# among the store's seen events, kept for `SEEN_EVENT_TTL`): the difference field by field,
# "Accept the new definition" and "Keep quarantined". Only the people and groups of `[mcp]
# mcp_admins` may click either; anyone else is told so, privately, and nothing changes.
# Accepting pins the listed definition (`Store.accept_tool_definition`, audited
# `mcp_tool_accepted`) and lifts the quarantine at once; keeping it leaves the tool quarantined
# and the card says who decided. Without a review channel the change is only logged.


ACTION_MCP_ACCEPT = "opsgate_mcp_accept"
ACTION_MCP_KEEP = "opsgate_mcp_keep"
_NOTICE = 2
"""The outbox priority of notices (`bot.slack.outbox.NOTICE`)."""
_SHOWN = 600


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def mcp_review_blocks(pin: McpPin) -> list[dict[str, Any]]:
    """The card: which tool, each changed field (pinned and listed), the two buttons."""
    assert pin.listed_definition is not None and pin.listed_digest is not None
    changes = changed_fields(
        ToolDefinition.from_json(pin.definition), ToolDefinition.from_json(pin.listed_definition)
    )
    name = f"{pin.server}__{pin.tool}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": "MCP tool changed"}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"`{name}` changed since it was reviewed: every call of it needs "
                "approval until an MCP admin accepts the new definition.",
            },
        },
    ]
    for field, change in changes.items():
        text = (
            f"*{field}*\nreviewed: `{_shown(change['before'])}`\n"
            f"listed now: `{_shown(change['after'])}`"
        )
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    value = "\t".join((pin.server, pin.tool, pin.listed_digest))
    blocks.append(
        {
            "type": "actions",
            "block_id": "opsgate_mcp_review",
            "elements": [
                _button("Accept the new definition", ACTION_MCP_ACCEPT, value, "primary"),
                _button("Keep quarantined", ACTION_MCP_KEEP, value, None),
            ],
        }
    )
    return blocks


def _button(text: str, action: str, value: str, style: str | None) -> dict[str, Any]:
    button = {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": action,
        "value": value,
    }
    return button | ({"style": style} if style else {})


async def post_reviews(store: Store, policy: Policy) -> int:
    """Put a review card in the outbox for each quarantined tool not yet shown; how many."""
    channel = policy.mcp.review_channel
    if channel is None:
        return 0
    posted = 0
    for pin in await store.mcp_pins():
        if pin.state != "quarantined" or pin.listed_digest is None:
            continue
        key = f"mcp-review:{pin.server}:{pin.tool}:{pin.listed_digest}"
        if not await store.first_sighting(key):
            continue
        params = {
            "channel": channel,
            "text": f"MCP tool {pin.server}__{pin.tool} changed since it was reviewed",
            "blocks": mcp_review_blocks(pin),
        }
        await store.put_outbox([OutboxEntry("chat.postMessage", params, _NOTICE, channel)])
        posted += 1
    return posted


_SAID: dict[ToolReview, str] = {
    "accepted": "<@{user}> accepted the new definition of `{name}`.",
    "decided_before": "`{name}`: that definition was already decided on.",
    "kept": "<@{user}> kept `{name}` quarantined.",
}
_NOT_AN_ADMIN = "Only the MCP admins ([mcp] mcp_admins) may decide on a changed tool."


class McpReview:
    """The review card's two buttons. Who may click is the one authorisation's answer
    (`Approvals.listed`, its cached user-group members), as for every other button."""

    def __init__(self, service: RunService) -> None:
        self.service = service

    async def accept(self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await self._decide(body, client, accept=True)

    async def keep(self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await self._decide(body, client, accept=False)

    async def _decide(self, body: dict[str, Any], client: AsyncWebClient, *, accept: bool) -> None:
        user, team = clicker(body)
        channel = str((body.get("channel") or {}).get("id") or "")
        if not team:  # a click that hides its workspace is refused, as every card click is
            refused = Refused("unknown_workspace", "approve", "the actor's workspace is unknown")
            await client.chat_postEphemeral(channel=channel, user=user, text=refusal_text(refused))
            return
        ts = str((body.get("container") or {}).get("message_ts") or "")
        actions = body.get("actions") or [{}]
        server, _, rest = str(actions[0].get("value") or "").partition("\t")
        tool, _, digest = rest.partition("\t")
        if not (user and server and tool and digest):
            return
        done = await self.service.review_tool(user, server, tool, digest, accept=accept)
        if done == "not_an_admin":
            await client.chat_postEphemeral(channel=channel, user=user, text=_NOT_AN_ADMIN)
            return
        said = _SAID[done].format(user=user, name=f"{server}__{tool}")
        section = {"type": "section", "text": {"type": "mrkdwn", "text": said}}
        await client.chat_update(channel=channel, ts=ts, text=said, blocks=[section])
