"""Bolt listeners, registered per kind of request. Each is thin: acknowledge, parse the Slack
payload, call the run service, render its answer through the Slack output."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import assistant, break_glass, cards, commands, feedback, home, messages, previews
from .messages import message_of

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

    from ...policy import Policy
    from ...runs.service import RunService
    from ..output import SlackThreadOutput

__all__ = ["message_of", "register"]


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
    home.register(app, service, output)
    cards.register(app, service, output)
    previews.register(app, service, output)
    break_glass.register(app, service, output)
    feedback.register(app, service, output)
    assistant.register(app, service, output)
    commands.register(app, service, output)
    messages.register_other_events(app)
