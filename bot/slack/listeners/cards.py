"""Clicks on approval cards and on the Home tab's copies of their buttons: Approve, Reject,
Cancel run, Edit, "Allow for <duration>", and the modals they open (the reject reason, the
edit form, the Allow dialog where the granter chooses a shape). Every click is acknowledged
before any slow work; what the clicker alone should know comes back as a notice, in the card's
thread (`tell`).

A click whose decision the database refused (full disk, read-only file) is told privately that
it was not saved, and the write health that `/readyz` reads records it (`click_saved`): the
click was acknowledged already, so the person must know to click again once the operator fixed
the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp

from ...runs.notices import Notice, NotSaved
from ...runs.output import PostFailed, Thread
from ...runs.service import RunService
from ...runs.views import AllowForm, EditErrors, EditForm
from ...store import StoreError
from ..ids import (
    ACTION_ALLOW,
    ACTION_APPROVE,
    ACTION_CANCEL,
    ACTION_EDIT,
    ACTION_REJECT,
    CALLBACK_ALLOW,
    CALLBACK_EDIT,
    CALLBACK_REJECT,
    shown_digest,
    shown_preview_digest,
)
from ..modals import allow_choice, edit_values, reason_from_view
from ..mrkdwn import escape_mrkdwn
from ..output import SlackThreadOutput

__all__ = [
    "PRE_CHECK_SECONDS",
    "Click",
    "click_of",
    "click_saved",
    "register",
    "republish",
    "tell",
]

logger = logging.getLogger("opsgate.slack.clicks")
ux_logger = logging.getLogger("opsgate.slack.ux")

PRE_CHECK_SECONDS = 1.0
"""How long a Reject click waits for the approvals check before opening the form anyway: the
form needs the click's `trigger_id`, which Slack honours for 3 seconds only."""


def register(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    """The card buttons, then the modals they open."""
    _register_decisions(app, service, output)
    _register_edits(app, service, output)
    _register_modals(app, service, output)


def _register_decisions(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    def saved(click: Click) -> AbstractAsyncContextManager[None]:
        return click_saved(
            service, output, user=click.user, ledger_id=click.ledger_id, thread=click.thread
        )

    @app.action(ACTION_APPROVE)
    async def on_approve(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        async with saved(click):
            await tell(
                service,
                output,
                click,
                await service.decisions.decide(
                    click.ledger_id,
                    "approved",
                    user=click.user,
                    team=click.team,
                    digest=click.digest,
                    preview_digest=click.preview_digest,
                ),
            )
        await republish(
            service,
            output,
            clicker=click.user,
            team=click.team,
            ledger_id=click.ledger_id,
            clicker_tab=click.thread is None,  # a card in a channel: only if they opened it
        )

    @app.action(ACTION_REJECT)
    async def on_reject(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        # A slow user-group lookup must not eat the trigger_id: if the check is not done in
        # time the form opens anyway, and submitting it checks again.
        check = service.decisions.check_reject(click.ledger_id, user=click.user, team=click.team)
        try:
            refusal = await asyncio.wait_for(check, PRE_CHECK_SECONDS)
        except TimeoutError:
            refusal = None
        if refusal is not None:
            await tell(service, output, click, refusal)
            return
        reasons = service.ctx.policy.reject_reasons
        failed = await output.replies.open_reject_form(click.trigger_id, click.ledger_id, reasons)
        if isinstance(failed, PostFailed) and click.thread is not None:
            await output.replies.tell_mrkdwn(
                click.thread,
                click.user,
                f"I couldn't open the rejection form ({escape_mrkdwn(failed.error)}); "
                "click Reject again.",
            )

    @app.action(ACTION_CANCEL)
    async def on_cancel(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        async with saved(click):
            notice = await service.cancels.from_card(
                click.ledger_id, user=click.user, team=click.team
            )
            await tell(service, output, click, notice)


def _register_edits(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    @app.action(ACTION_EDIT)
    async def on_edit(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        form = await service.edits.form(click.ledger_id, user=click.user, team=click.team)
        if not isinstance(form, EditForm):
            await tell(service, output, click, form)
            return
        failed = await output.replies.open_edit_form(click.trigger_id, form)
        if failed is not None:
            ux_logger.warning("could not open the edit form: %s", failed.error)
            thread = click.thread or await service.decisions.thread_of_call(click.ledger_id)
            if thread is not None:  # the clicker must not be left waiting for a form
                await output.replies.tell_mrkdwn(
                    thread,
                    click.user,
                    f"I couldn't open the edit form ({escape_mrkdwn(failed.error)}); "
                    "click Edit again, or approve or reject the call as it is.",
                )

    @app.action(ACTION_ALLOW)
    async def on_allow(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = click_of(body)
        form = await service.edits.allow_form(click.ledger_id, user=click.user, team=click.team)
        if isinstance(form, AllowForm):  # shapes to choose from: the dialog decides
            failed = await output.replies.open_allow_form(click.trigger_id, form)
            if failed is not None:
                ux_logger.warning("could not open the allow dialog: %s", failed.error)
            return
        if form is not None:
            await tell(service, output, click, form)
            return
        async with click_saved(
            service, output, user=click.user, ledger_id=click.ledger_id, thread=click.thread
        ):
            notice = await service.edits.allow(
                click.ledger_id, user=click.user, team=click.team, digest=click.digest
            )
            await tell(service, output, click, notice)
        await republish(
            service,
            output,
            clicker=click.user,
            team=click.team,
            ledger_id=click.ledger_id,
            clicker_tab=click.thread is None,  # a card in a channel: only if they opened it
        )


def _register_modals(app: AsyncApp, service: RunService, output: SlackThreadOutput) -> None:
    @app.view(CALLBACK_EDIT)
    async def on_edit_submitted(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        user = body.get("user") or {}
        user_id, team = str(user.get("id")), user.get("team_id")
        ledger_id = str(view.get("private_metadata") or "")
        result: Notice | EditErrors | None = None
        # Acknowledged whatever happens: a modal left without its ack shows Slack's error.
        async with click_saved(service, output, user=user_id, ledger_id=ledger_id, thread=None):
            result = await service.edits.submit(
                ledger_id, edit_values(view), user=user_id, team=team
            )
        if isinstance(result, EditErrors):
            await ack(response_action="errors", errors=result.errors)
            return
        await ack()
        if result is not None:
            thread = await service.decisions.thread_of_call(ledger_id)
            if thread is not None:
                await output.tell(thread, user_id, result)
        await republish(service, output, clicker=user_id, team=team, ledger_id=ledger_id)

    @app.view(CALLBACK_REJECT)
    async def on_reject_submitted(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        await ack()
        user = body.get("user") or {}
        user_id = str(user.get("id"))
        ledger_id = str(view.get("private_metadata") or "")
        notice = None
        async with click_saved(service, output, user=user_id, ledger_id=ledger_id, thread=None):
            notice = await service.decisions.decide(
                ledger_id,
                "rejected",
                user=user_id,
                team=user.get("team_id"),
                reason=reason_from_view(view),
            )
        if notice is not None and (thread := await service.decisions.thread_of_call(ledger_id)):
            await output.tell(thread, user_id, notice)
        await republish(
            service, output, clicker=user_id, team=user.get("team_id"), ledger_id=ledger_id
        )

    @app.view(CALLBACK_ALLOW)
    async def on_allow_submitted(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        user = body.get("user") or {}
        user_id, team = str(user.get("id")), user.get("team_id")
        ledger_id, digest, choice = allow_choice(view)
        async with click_saved(service, output, user=user_id, ledger_id=ledger_id, thread=None):
            notice = await service.edits.allow(
                ledger_id, user=user_id, team=team, digest=digest, choice=choice
            )
            if notice is not None:
                thread = await service.decisions.thread_of_call(ledger_id)
                if thread is not None:
                    await output.tell(thread, user_id, notice)
        await republish(service, output, clicker=user_id, team=team, ledger_id=ledger_id)


@dataclass(frozen=True, slots=True)
class Click:
    """A button click, as far as the run service cares."""

    ledger_id: str
    """The button's value: the only thing a card's buttons carry."""
    user: str
    team: str | None
    """The clicker's workspace (not the channel's, in a Slack Connect channel)."""
    thread: Thread | None
    """The card's thread, for a private answer; None if the payload does not say."""
    trigger_id: str
    digest: str | None = None
    """The digest the clicked card showed (its buttons' block id); None if it does not say."""
    preview_digest: str | None = None
    """Its preview's digest, on a card that showed a preview."""


def click_of(body: dict[str, Any]) -> Click:
    user = body.get("user") or {}
    team = user.get("team_id") or (body.get("team") or {}).get("id")
    container = body.get("container") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
    if container.get("type") == "view":  # the Home tab: no channel, no thread
        channel = None
    message = body.get("message") or {}
    thread_ts = message.get("thread_ts") or message.get("ts")
    thread = Thread(str(team or ""), str(channel), str(thread_ts)) if channel else None
    return Click(
        ledger_id=str(body["actions"][0].get("value") or ""),
        user=str(user.get("id")),
        team=str(team) if team else None,
        thread=thread,
        trigger_id=str(body.get("trigger_id") or ""),
        digest=shown_digest(body["actions"][0].get("block_id")),
        preview_digest=shown_preview_digest(body["actions"][0].get("block_id")),
    )


async def tell(
    service: RunService, output: SlackThreadOutput, click: Click, notice: Notice | None
) -> None:
    """`notice` for the clicker alone, in the card's thread (a click on the Home tab has no
    thread: the card's is looked up)."""
    if notice is None:
        return
    thread = click.thread or await service.decisions.thread_of_call(click.ledger_id)
    if thread is not None:
        await output.tell(thread, click.user, notice)


@contextlib.asynccontextmanager
async def click_saved(
    service: RunService,
    output: SlackThreadOutput,
    *,
    user: str,
    ledger_id: str,
    thread: Thread | None,
) -> AsyncIterator[None]:
    """Run the click's work; a `StoreError` from it is recorded, told and not raised."""
    try:
        yield
    except StoreError as exc:
        service.ctx.health.failed("saving a click", exc)
        logger.error("a click by %s on %s was not saved: %s", user, ledger_id, exc)
        if thread is None:
            with contextlib.suppress(StoreError):  # reading may fail too: nowhere to answer
                thread = await service.decisions.thread_of_call(ledger_id)
        if thread is not None:
            await output.tell(thread, user, NotSaved("click"))


# -- Home tabs after a click ----------------------------------------------------------------------
# Republishing Home tabs after a decision: the clicker's, and those of the people who opened
# theirs lately and see the change (the call's requester, its channel's approvers).
#
# Only tabs somebody has seen are republished: a person who never opened the Home tab (or not
# lately) gets theirs drawn fresh when they open it (`app_home_opened`), so publishing it on every
# click would only cost a `views.publish` and the queries behind it, on the event loop that
# acknowledges the next clicks (docs/architecture.md, "Home tab").


async def republish(
    service: RunService,
    output: SlackThreadOutput,
    *,
    clicker: str,
    team: str | None,
    ledger_id: str | None = None,
    channel: str | None = None,
    clicker_tab: bool = True,
) -> None:
    """After a decision on call `ledger_id` (or a change to `channel`'s allowances).

    `clicker_tab`: the clicker's own tab is republished even if the store does not list them
    as a recent opener (the click came from the Home tab, or from where it does not say)."""
    viewers = await service.ctx.store.home_viewers()
    people: dict[str, str | None] = {}
    if clicker_tab or any(viewer.user_id == clicker for viewer in viewers):
        people[clicker] = team
    if viewers:
        affected = await service.home.affected(
            ledger_id=ledger_id, channel=channel, viewers=viewers
        )
        for viewer in affected:
            people.setdefault(viewer.user_id, viewer.team_id)
    for user, their_team in people.items():
        if not await output.replies.owe_home(user, their_team):  # else drawn and published now
            await output.replies.publish_home(await service.home.view(user, team=their_team))
