"""The Slack layer: the Bolt app and its listeners, the Slack `ThreadOutput`, Block Kit
rendering and the one path from untrusted text to mrkdwn (`mrkdwn`). Every wire string is in
`ids`.

Nothing outside this package calls the Slack Web API for a thread.
"""

from __future__ import annotations

from .app import (
    ListenerTasks,
    bolt_app,
    channel_members,
    group_members,
    slack_client,
    user_by_email,
)
from .listeners import register
from .output import SlackThreadOutput

__all__ = [
    "ListenerTasks",
    "SlackThreadOutput",
    "bolt_app",
    "channel_members",
    "group_members",
    "register",
    "slack_client",
    "user_by_email",
]
