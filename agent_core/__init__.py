"""agent_core: an approval-aware LLM agent loop over OpenAI-compatible streaming APIs.

It knows nothing about Slack; `bot` is one front end of it, `opsgate chat` another.
"""

from ._invoke import ApprovalGate, FunctionInvokingChatClient, RunJournal, pending_tool_calls
from .agent import ChatClientAgent, ContextProvider
from .approvals import AgentRunOptions, Decision, ToolApprovalResponse
from .chat_client import ChatClient, ChatOptions
from .events import (
    AgentResponseUpdate,
    ChatUpdate,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolApprovalRequest,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallHeld,
    ToolCallStarted,
    ToolResult,
    Usage,
)
from .exceptions import (
    AgentCoreError,
    ChatClientError,
    PendingApprovalError,
    ProviderError,
    ResumeError,
    StreamError,
    ToolCallAlreadyStarted,
    ToolError,
)
from .messages import ChatMessage, Role, ToolCall, call_digest, canonical_arguments
from .openai import OpenAIChatClient
from .sessions import AgentSession, InMemorySessionStore, SessionStore
from .tools import ApprovalRequiredTool, FunctionTool, Tool, tool

__all__ = [
    "AgentCoreError",
    "AgentResponseUpdate",
    "AgentRunOptions",
    "AgentSession",
    "ApprovalGate",
    "ApprovalRequiredTool",
    "ChatClient",
    "ChatClientAgent",
    "ChatClientError",
    "ChatMessage",
    "ChatOptions",
    "ChatUpdate",
    "ContextProvider",
    "Decision",
    "Finish",
    "FinishReason",
    "FunctionInvokingChatClient",
    "FunctionTool",
    "InMemorySessionStore",
    "OpenAIChatClient",
    "PendingApprovalError",
    "ProviderError",
    "ReasoningDelta",
    "ResumeError",
    "Role",
    "RunJournal",
    "SessionStore",
    "StreamError",
    "TextDelta",
    "Tool",
    "ToolApprovalRequest",
    "ToolApprovalResponse",
    "ToolCall",
    "ToolCallAlreadyStarted",
    "ToolCallArgumentsDelta",
    "ToolCallEnded",
    "ToolCallHeld",
    "ToolCallStarted",
    "ToolError",
    "ToolResult",
    "Usage",
    "call_digest",
    "canonical_arguments",
    "pending_tool_calls",
    "tool",
]
