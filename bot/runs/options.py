"""What a channel's policy adds to each run there: its instructions and its tool set.

Both apply to every model request of a session, the first run and each resume alike: a resume
offered fewer tools than the run that paused would answer a stored call "unknown tool".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from agent_core import (
    AgentRunOptions,
    AgentSession,
    ApprovalGate,
    ChatMessage,
    Tool,
    ToolApprovalResponse,
)

from ..policy import Policy

__all__ = ["CHANNEL_KEY", "ChannelInstructions", "run_options", "session_for"]


CHANNEL_KEY = "channel"
"""The `AgentSession.metadata` key naming the Slack channel a session lives in."""


def session_for(session_id: str, channel: str) -> AgentSession:
    """The agent session of a Slack thread, carrying its channel for the context providers."""
    return AgentSession(session_id, metadata={CHANNEL_KEY: channel})


class ChannelInstructions:
    """An agent_core `ContextProvider`: the channel's `instructions` as a system message.

    They come from the policy file (trusted configuration), are sent with every request of the
    run and are never stored in the history, so editing the policy changes the next run.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    async def on_invoking(
        self, session: AgentSession, messages: Sequence[ChatMessage]
    ) -> Sequence[ChatMessage]:
        channel = session.metadata.get(CHANNEL_KEY)
        text = self.policy.instructions_for(channel) if isinstance(channel, str) else None
        if not text:
            return []
        return [ChatMessage.system(f"Instructions for this channel ({channel}):\n{text}")]

    async def on_invoked(
        self,
        session: AgentSession,
        request: Sequence[ChatMessage],
        response: Sequence[ChatMessage],
    ) -> None:
        return None


def run_options(
    policy: Policy,
    tools: Mapping[str, Tool],
    channel: str,
    responses: Iterable[ToolApprovalResponse] = (),
    gate: ApprovalGate | None = None,
    turn_timeout: float | None = None,
) -> AgentRunOptions:
    """Run options for a run in `channel`: its tool set (when the policy restricts it), and
    the run's approval gate (the channel's allowances) when given."""
    offered = policy.offered_tools(channel, tools)
    return AgentRunOptions(
        tools=offered,
        tool_approval_responses=tuple(responses),
        approval_gate=gate,
        turn_timeout=turn_timeout,
    )
