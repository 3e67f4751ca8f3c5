"""One exception tree for the agent framework: catch `AgentCoreError` to catch them all."""

from __future__ import annotations

__all__ = [
    "AgentCoreError",
    "ChatClientError",
    "PendingApprovalError",
    "ProviderError",
    "ResumeError",
    "StreamError",
    "ToolCallAlreadyStarted",
    "ToolError",
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
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.provider_message = provider_message
        self.partial_text = partial_text
        self.code = code
        """The provider's error code word, e.g. OpenAI's "context_length_exceeded"."""

    @property
    def context_exceeded(self) -> bool:
        """The request did not fit the model's context window (OpenAI's HTTP 400 shape, or the
        wording other OpenAI-compatible servers use)."""
        if self.code == "context_length_exceeded":
            return True
        text = (self.provider_message or "").lower()
        return self.status_code == 400 and (
            "maximum context length" in text or "context_length_exceeded" in text
        )


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


class ToolCallAlreadyStarted(AgentCoreError):
    """The store says this call has already started; running it again could run it twice."""

    def __init__(self, call_id: str, status: str) -> None:
        super().__init__(f"tool call {call_id!r} is already {status}; it will not run again")
        self.call_id = call_id
        self.status = status
