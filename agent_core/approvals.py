"""The caller's answer to a `ToolApprovalRequest`, and the run options that carry it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from .chat_client import ChatOptions
from .tools import Tool

__all__ = ["AgentRunOptions", "Decision", "ToolApprovalResponse"]

Decision = Literal["approved", "rejected", "expired"]


@dataclass(frozen=True, slots=True)
class ToolApprovalResponse:
    """A decision on one paused call. It names the call only: what runs is the stored call."""

    call_id: str
    decision: Decision
    reason: str | None = None
    decided_by: str | None = None
    ttl: str | None = None
    """For `expired`: the time limit that ran out, in words (e.g. "15m")."""

    @property
    def approved(self) -> bool:
        return self.decision == "approved"

    @classmethod
    def approve(cls, call_id: str, *, decided_by: str | None = None) -> ToolApprovalResponse:
        return cls(call_id, "approved", decided_by=decided_by)

    @classmethod
    def reject(
        cls, call_id: str, reason: str | None = None, *, decided_by: str | None = None
    ) -> ToolApprovalResponse:
        return cls(call_id, "rejected", reason=reason, decided_by=decided_by)

    @classmethod
    def expire(cls, call_id: str, ttl: str) -> ToolApprovalResponse:
        return cls(call_id, "expired", ttl=ttl)

    def tool_message_text(self) -> str:
        """What the model is told about a call that did not run."""
        if self.decision == "expired":
            ttl = self.ttl or "the time limit"
            return f"Expired: no decision within {ttl}; the call was not run"
        text = f"Rejected: {self.reason or 'User denied'}"
        if self.decided_by:
            text += f" (rejected by {self.decided_by})"
        return text


@dataclass(frozen=True, slots=True)
class AgentRunOptions:
    """Options of one `ChatClientAgent.run`. Immutable: the `with_*` methods return copies."""

    tool_approval_responses: tuple[ToolApprovalResponse, ...] = ()
    max_rounds: int | None = None
    chat: ChatOptions = field(default_factory=ChatOptions)
    tools: tuple[Tool, ...] | None = None
    """Overrides the agent's tools for this run (e.g. a per-channel tool set)."""

    def with_tool_approval_responses(
        self, responses: Iterable[ToolApprovalResponse]
    ) -> AgentRunOptions:
        return dataclasses.replace(self, tool_approval_responses=tuple(responses))
