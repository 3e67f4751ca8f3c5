"""Runs: one agent run's whole life, independent of Slack (see `docs/architecture.md`)."""

from .clicks import Answer, Click
from .notices import Notice
from .output import PostFailed, TextSink, Thread, ThreadOutput
from .service import Dispatcher, RunService
from .timeline import AssistantStatus, Task, TimelineSink
from .views import CardCall, CardOutcome, CardRef, ChannelHelp, OutcomeStatus, PendingEntry

__all__ = [
    "Answer",
    "AssistantStatus",
    "CardCall",
    "CardOutcome",
    "CardRef",
    "ChannelHelp",
    "Click",
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
