"""Runs: one agent run's whole life, independent of Slack (see `docs/architecture.md`)."""

from .notices import Notice
from .output import PostFailed, TextSink, Thread, ThreadOutput
from .service import Dispatcher, RunService
from .timeline import AssistantStatus, Task, TimelineSink
from .views import CardCall, CardOutcome, CardRef, ChannelHelp, OutcomeStatus, PendingEntry

__all__ = [
    "AssistantStatus",
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
    "Task",
    "TextSink",
    "Thread",
    "ThreadOutput",
    "TimelineSink",
]
