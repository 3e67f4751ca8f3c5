"""Runs: one agent run's whole life, independent of Slack (see `docs/architecture.md`)."""

from .cards import CardCall, CardOutcome, CardRef, ChannelHelp, OutcomeStatus, PendingEntry
from .notices import Notice
from .output import PostFailed, TextSink, Thread, ThreadOutput
from .queue import Dispatcher
from .service import RunService

__all__ = [
    "CardCall",
    "CardOutcome",
    "CardRef",
    "ChannelHelp",
    "Dispatcher",
    "Notice",
    "OutcomeStatus",
    "PendingEntry",
    "PostFailed",
    "RunService",
    "TextSink",
    "Thread",
    "ThreadOutput",
]
