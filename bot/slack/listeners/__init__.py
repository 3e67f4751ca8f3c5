"""Bolt listeners: bound methods of small classes, one per kind of request, registered from one
table (`table.routes`). Each is thin: acknowledge, read the Slack payload
(`bot.slack.ids`), make one call of the run service, render its answer through the Slack
output."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..intake import request_kind as _request_kind
from . import commands, messages
from .table import Route, register, routes

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from slack_bolt.async_app import AsyncBoltContext

    from ...policy import Policy
    from ...runs.service import RunService
    from ..intake import RowOf, Saving

__all__ = ["Route", "register", "routes", "row_of"]


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
