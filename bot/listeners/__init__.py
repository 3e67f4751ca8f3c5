"""Bolt listeners, registered per kind of request."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from ..runner import Runner
from . import actions, commands, events, views

__all__ = ["register"]


def register(app: AsyncApp, runner: Runner) -> None:
    events.register(app, runner)
    actions.register(app, runner)
    commands.register(app, runner)
    views.register(app, runner)
