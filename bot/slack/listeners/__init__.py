"""Bolt listeners: bound methods of small classes, grouped by the Slack surface they answer
(Events API messages and the AI-app container; card and feedback clicks with the modals they
open; `/opsgate`, the Home tab and the shortcut), registered from one table (`table.routes`)
behind the one intake (`bot.slack.app.install`). Each is thin: acknowledge, read the Slack
payload (`bot.slack.ids`), make one call of the run service, render its answer through the
Slack output."""

from __future__ import annotations

from .table import Route, register, routes, row_of

__all__ = ["Route", "register", "routes", "row_of"]
