"""The scripted chat client and history checks, now shipped as `agent_core.testing`."""

from agent_core.testing import (
    FunctionChatClient,
    Request,
    ScriptedChatClient,
    ScriptExhausted,
    Turn,
    call,
    collect,
    history_problems,
)

__all__ = [
    "FunctionChatClient",
    "Request",
    "ScriptExhausted",
    "ScriptedChatClient",
    "Turn",
    "call",
    "collect",
    "history_problems",
]
