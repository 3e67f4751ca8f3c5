"""One exception tree for the agent framework: catch `AgentCoreError` to catch them all."""

from __future__ import annotations

import re

__all__ = [
    "AgentCoreError",
    "ChatClientError",
    "PendingApprovalError",
    "ProviderError",
    "ResumeError",
    "StreamError",
    "ToolCallAlreadyStarted",
    "ToolError",
    "ToolTimeout",
]


class AgentCoreError(Exception):
    """Base of every error raised by `agent_core`."""


class ChatClientError(AgentCoreError):
    """The model endpoint could not give us a usable answer."""


class ProviderError(ChatClientError):
    """The provider answered with an error: an HTTP status, or an error inside the stream.

    `partial_text` keeps whatever text had streamed before the error so nothing the user
    already saw is lost.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        provider_message: str | None = None,
        partial_text: str = "",
        code: str | None = None,
        kind: str | None = None,
        context_window: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.provider_message = provider_message
        self.partial_text = partial_text
        self.code = code
        """The provider's error code word, e.g. OpenAI's "context_length_exceeded"."""
        self.kind = kind
        """The provider's error type word, e.g. llama.cpp's "exceed_context_size_error"."""
        self._context_window = context_window

    @property
    def context_exceeded(self) -> bool:
        """The request did not fit the model's context window: OpenAI's and vLLM's HTTP 400
        ("maximum context length is N tokens"), llama.cpp's `exceed_context_size_error`, or
        the wording other OpenAI-compatible servers use (Ollama: "exceeds context length")."""
        if self.code == "context_length_exceeded" or self.kind == "exceed_context_size_error":
            return True
        text = (self.provider_message or "").lower()
        return self.status_code == 400 and any(
            words in text
            for words in (
                "maximum context length",
                "context_length_exceeded",
                "exceeds the available context size",
                "exceeds context length",
                "exceeded max context length",
                "context window",
            )
        )

    @property
    def context_window(self) -> int | None:
        """The model's real window, when the refusal says it (llama.cpp's `n_ctx`, or "maximum
        context length is N tokens" in the message); `None` when it does not."""
        if self._context_window is not None:
            return self._context_window
        if not self.context_exceeded:
            return None
        found = _WINDOW.search(self.provider_message or "")
        return int(found.group(1).replace(",", "")) if found else None


class StreamError(ChatClientError):
    """The stream itself was unusable: malformed JSON, or cut off before it finished."""

    def __init__(self, message: str, *, partial_text: str = "") -> None:
        super().__init__(message)
        self.partial_text = partial_text


class ResumeError(AgentCoreError):
    """A resume was refused: a gated call is undecided, or a response names no pending call."""


class PendingApprovalError(ResumeError):
    """A new message came for a session whose last tool calls still wait for decisions."""


class ToolError(AgentCoreError):
    """Raise inside a tool to send a clean error message back to the model."""


class ToolTimeout(ToolError):
    """Raise inside a tool that ran past its time limit and was stopped: the model reads the
    message (with whatever output there was), and the result says `timed_out`, so metrics and
    traces count a timeout apart from other errors."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class ToolCallAlreadyStarted(AgentCoreError):
    """The store says this call has already started; running it again could run it twice."""

    def __init__(self, call_id: str, status: str) -> None:
        super().__init__(f"tool call {call_id!r} is already {status}; it will not run again")
        self.call_id = call_id
        self.status = status


_WINDOW = re.compile(
    r"(?:maximum context length|context (?:length|size|window))(?: is| of)?:? \(?(\d[\d,]*) tokens",
    re.IGNORECASE,
)
"""A window in an error message: OpenAI's and vLLM's "maximum context length is 4096 tokens",
llama.cpp's "available context size (4096 tokens)". Not Ollama's "exceeded max context length
by 12 tokens", which is how far over, not the window."""
