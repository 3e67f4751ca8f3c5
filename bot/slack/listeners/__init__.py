"""Bolt listeners, registered per kind of request. Each is thin: acknowledge, parse the Slack
payload, call the run service, render its answer through the Slack output."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import mcp_review as _mcp_review
from ..intake import request_kind as _request_kind
from . import assistant, break_glass, cards, commands, feedback, home, messages, previews

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from slack_bolt.async_app import AsyncApp, AsyncBoltContext

    from ...policy import Policy
    from ...runs.service import RunService
    from ..intake import RowOf, Saving
    from ..output import SlackThreadOutput

__all__ = ["register", "row_of"]


def row_of(service: RunService, policy: Policy) -> RowOf:
    """Which requests the one intake saves as rows of their own, as their listeners would: a
    message the bot acts on (`messages.message_of`), a `/opsgate <request>`
    (`commands.slash_of`)."""
    of_message = messages.message_of(service, policy)

    async def of(body: Mapping[str, Any], context: AsyncBoltContext) -> Saving | None:
        match _request_kind(body):
            case "event_callback":
                return await of_message(body, context)
            case "command":
                return commands.slash_of(body)
            case _:
                return None

    return of


def register(
    app: AsyncApp,
    service: RunService,
    output: SlackThreadOutput,
    *,
    policy: Policy,
) -> None:
    """Every listener of the app, in the order Bolt tries them: messages first (the requests
    that come most, in bursts: Bolt runs every earlier listener's matchers for each request,
    and no other listener takes `app_mention` or `message` events), the catch-all event last."""
    messages.register(app, service, policy=policy)
    assistant.register(app, service, output)  # before home: it takes the Messages tab's opens
    home.register(app, service, output)
    cards.register(app, service, output)
    previews.register(app, service, output)
    break_glass.register(app, service, output)
    feedback.register(app, service, output)
    commands.register(app, service, output)
    _mcp_review.register(app, service, policy)
    messages.register_other_events(app)
