"""agent_core: an approval-aware LLM agent loop over OpenAI-compatible streaming APIs.

It knows nothing about Slack; `bot` is one front end of it, `opsgate chat` another.
`agent_core.testing` ships a scripted chat client for tests of code built on it.

Exceptions (catch `AgentCoreError` to catch them all):

    AgentCoreError
    ├── ChatClientError           the model endpoint gave no usable answer
    │   ├── ProviderError         it answered with an error (HTTP status, or in the stream)
    │   └── StreamError           the stream was malformed or cut off
    ├── ResumeError               a resume was refused (undecided or unknown calls)
    │   └── PendingApprovalError  new messages for a session still waiting for decisions
    ├── ToolCallAlreadyStarted    the store says the call started already; never run twice
    └── ToolError                 raised by a tool: a clean error message for the model
        └── ToolTimeout           the tool ran past its time limit and was stopped
"""

from ._loop import ApprovalGate, FunctionInvokingChatClient, RequestView, RunJournal
from .agent import ChatClientAgent, ContextProvider
from .approvals import (
    AgentRunOptions,
    Decision,
    ToolApprovalResponse,
    close_batch,
    pending_tool_calls,
    undecided_calls,
)
from .chat_client import ChatClient, ChatOptions
from .context import (
    ContextBudget,
    ContextWindowMemory,
    InMemoryContextWindows,
    context_tokens_for,
    counter_for,
    excerpt,
    resolve_context_window,
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
    ToolTimeout,
)
from .messages import (
    AgentResponseUpdate,
    CallOutcome,
    Cancelled,
    ChatMessage,
    ChatUpdate,
    Edited,
    Expired,
    Finish,
    FinishReason,
    Interrupted,
    NotRun,
    ReasoningDelta,
    Rejected,
    Role,
    TextDelta,
    ToolApprovalRequest,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallHeld,
    ToolCallStarted,
    ToolResult,
    ToolRunning,
    Usage,
    call_digest,
    canonical_arguments,
    has_lone_surrogates,
    render_outcome,
    replace_lone_surrogates,
    replace_lone_surrogates_in,
)
from .openai import OpenAIChatClient
from .sessions import AgentSession, InMemorySessionStore, SessionStore, StoredContext, Summary
from .tools import ApprovalRequiredTool, FunctionTool, Tool, tool

__all__ = [
    "AgentCoreError",
    "AgentResponseUpdate",
    "AgentRunOptions",
    "AgentSession",
    "ApprovalGate",
    "ApprovalRequiredTool",
    "CallOutcome",
    "Cancelled",
    "ChatClient",
    "ChatClientAgent",
    "ChatClientError",
    "ChatMessage",
    "ChatOptions",
    "ChatUpdate",
    "ContextBudget",
    "ContextProvider",
    "ContextWindowMemory",
    "Decision",
    "Edited",
    "Expired",
    "Finish",
    "FinishReason",
    "FunctionInvokingChatClient",
    "FunctionTool",
    "InMemoryContextWindows",
    "InMemorySessionStore",
    "Interrupted",
    "NotRun",
    "OpenAIChatClient",
    "PendingApprovalError",
    "ProviderError",
    "ReasoningDelta",
    "Rejected",
    "RequestView",
    "ResumeError",
    "Role",
    "RunJournal",
    "SessionStore",
    "StoredContext",
    "StreamError",
    "Summary",
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
    "ToolRunning",
    "ToolTimeout",
    "Usage",
    "call_digest",
    "canonical_arguments",
    "close_batch",
    "context_tokens_for",
    "counter_for",
    "excerpt",
    "has_lone_surrogates",
    "pending_tool_calls",
    "render_outcome",
    "replace_lone_surrogates",
    "replace_lone_surrogates_in",
    "resolve_context_window",
    "tool",
    "undecided_calls",
]
