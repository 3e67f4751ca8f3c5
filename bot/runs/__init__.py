"""Runs: one agent run's whole life, independent of Slack (see `docs/architecture.md`)."""

from .notices import Notice
from .output import PostFailed, TextSink, Thread, ThreadOutput
from .service import Dispatcher, RunService
from .views import CardCall, CardOutcome, CardRef, ChannelHelp, OutcomeStatus, PendingEntry

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
