"""The one table of the app's listeners (`routes`), and its registration with Bolt behind the one
intake (`register`): which listener answers which event, action, view, command or shortcut, in
the order Bolt tries them, and which requests the intake saves as rows of their own (`row_of`).
Bolt accepts bound methods, so each listener is a method of its class (`bot.slack.listeners`)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from slack_bolt.context.async_context import AsyncBoltContext

from ..app import RowOf, Saving, install, request_kind
from ..ids import (
    ACTION_ALLOW,
    ACTION_APPROVE,
    ACTION_BREAK_GLASS,
    ACTION_CANCEL,
    ACTION_EDIT,
    ACTION_FEEDBACK,
    ACTION_REJECT,
    ACTION_RERUN_PREVIEW,
    ACTION_REVIEWED,
    ACTION_REVOKE,
    CALLBACK_ALLOW,
    CALLBACK_BREAK_GLASS,
    CALLBACK_EDIT,
    CALLBACK_FEEDBACK,
    CALLBACK_REJECT,
    COMMAND,
    SHORTCUT,
)
from .cards import ACTION_MCP_ACCEPT, ACTION_MCP_KEEP, CardClicks, FeedbackClicks, McpReview
from .commands import HomeTab, SlashCommand, slash_of
from .messages import Assistant, Messages, message_of, other_event

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

    from ...policy import Policy
    from ...runs.service import RunService
    from ..output import SlackThreadOutput

__all__ = ["Listener", "Route", "register", "routes", "row_of"]

Listener = Callable[..., Awaitable[Any]]
"""A Bolt listener, matcher or middleware: Bolt passes the arguments it names."""


@dataclass(frozen=True, slots=True)
class Route:
    """One registration: Bolt's `app.<kind>(key, matchers=…, middleware=…)(listener)`."""

    kind: Literal["event", "action", "view", "command", "shortcut"]
    key: str | re.Pattern[str]
    """The event type, action id, callback id or command."""
    listener: Listener
    matchers: Sequence[Listener] = ()
    middleware: Sequence[Listener] = ()


def routes(service: RunService, output: SlackThreadOutput, *, policy: Policy) -> list[Route]:
    """Every listener of the app, in the order Bolt tries them: messages first (the requests
    that come most, in bursts: Bolt runs every earlier listener's matchers for each request,
    and no other listener takes `app_mention` or `message` events), the AI-app container's
    Messages tab before the Home tab (both are `app_home_opened`), the catch-all event last."""
    messages = Messages(service, policy)
    assistant = Assistant(service, output)
    home = HomeTab(service, output)
    cards = CardClicks(service, output)
    feedback = FeedbackClicks(service, output)
    mcp = McpReview(service)
    return [
        Route("event", "app_mention", messages.incoming, middleware=[messages.once]),
        Route("event", "message", messages.incoming, middleware=[messages.once]),
        Route(
            "event",
            "app_home_opened",
            assistant.messages_opened,
            matchers=[assistant.messages_tab],
        ),
        Route("event", "app_context_changed", assistant.app_context),
        Route("event", "assistant_thread_started", assistant.started),
        Route("event", "assistant_thread_context_changed", assistant.context_changed),
        Route("action", ACTION_REVOKE, home.revoke),
        Route("event", "app_home_opened", home.opened),
        Route("event", "member_left_channel", home.membership),
        Route("event", "member_joined_channel", home.membership),
        Route("shortcut", SHORTCUT, home.shortcut),
        Route("action", ACTION_APPROVE, cards.approve),
        Route("action", ACTION_REJECT, cards.reject),
        Route("action", ACTION_CANCEL, cards.cancel),
        Route("action", ACTION_EDIT, cards.edit),
        Route("action", ACTION_ALLOW, cards.allow),
        Route("view", CALLBACK_EDIT, cards.edit_submitted),
        Route("view", CALLBACK_REJECT, cards.reject_submitted),
        Route("view", CALLBACK_ALLOW, cards.allow_submitted),
        Route("action", ACTION_RERUN_PREVIEW, cards.rerun_preview),
        Route("action", ACTION_BREAK_GLASS, cards.break_glass),
        Route("view", CALLBACK_BREAK_GLASS, cards.glass_submitted),
        Route("action", ACTION_REVIEWED, cards.reviewed),
        Route("action", ACTION_FEEDBACK, feedback.rate),
        Route("view", CALLBACK_FEEDBACK, feedback.reason),
        Route("command", COMMAND, SlashCommand(service, output).command),
        Route("action", ACTION_MCP_ACCEPT, mcp.accept),
        Route("action", ACTION_MCP_KEEP, mcp.keep),
        Route("event", re.compile(".*"), other_event),
    ]


def register(
    app: AsyncApp,
    service: RunService,
    output: SlackThreadOutput,
    *,
    policy: Policy,
) -> None:
    """The app's listeners, calling `service`. Every request of every kind is saved once,
    deduplicated in the same transaction, by the one intake middleware before any listener
    acknowledges it (`bot.slack.app.install`); then every route of `routes`, in its order."""
    # Before any listener: the one intake (a message to act on, or a `/opsgate` request, is
    # saved as its own row).
    install(app, service, output, row_of=row_of(service, policy))
    for route in routes(service, output, policy=policy):
        add = getattr(app, route.kind)
        matchers, middleware = list(route.matchers) or None, list(route.middleware) or None
        add(route.key, matchers=matchers, middleware=middleware)(route.listener)


def row_of(service: RunService, policy: Policy) -> RowOf:
    """Which requests the one intake saves as rows of their own, as their listeners would: a
    message the bot acts on (`messages.message_of`), a `/opsgate <request>`
    (`commands.slash_of`)."""
    of_message = message_of(service, policy)

    async def of(body: Mapping[str, Any], context: AsyncBoltContext) -> Saving | None:
        match request_kind(body):
            case "event_callback":
                return await of_message(body, context)
            case "command":
                return slash_of(body)
            case _:
                return None

    return of
