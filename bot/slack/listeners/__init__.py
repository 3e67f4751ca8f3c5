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
    """Every listener of the app, in the order Bolt tries them (the catch-all event last)."""
    home.register(app, service, output)
    cards.register(app, service, output)
    previews.register(app, service, output)
    break_glass.register(app, service, output)
    feedback.register(app, service, output)
    assistant.register(app, service, output)
    messages.register(app, service, policy=policy)
    commands.register(app, service, output)
