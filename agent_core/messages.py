"""Chat messages as the OpenAI-compatible wire knows them, and their lossless JSON form."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .unicode import replace_lone_surrogates, replace_lone_surrogates_in

__all__ = [
    "ChatMessage",
    "Role",
    "ToolCall",
    "call_digest",
    "canonical_arguments",
]

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One function call the model asked for. `arguments` is the raw JSON text the model sent.

    The raw text is kept (not a parsed dict) because it is what the provider expects back in the
    history, and because malformed arguments must survive to be reported, not silently dropped.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = ""
    gated: bool = False
    """Set by the tool loop on a call it held for a human decision. Stored with the history so a
    resume asks for exactly the decisions the cards asked for, even if the policy changed in
    between; never sent to the provider."""

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a JSON object; raises `ValueError` with a readable message if not."""
        text = self.arguments.strip() or "{}"
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments of {self.name!r} are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"arguments of {self.name!r} must be a JSON object")
        return replace_lone_surrogates_in(value)  # type: ignore[no-any-return]

    def display_arguments(self) -> Any:
        """What people are shown and what `call_digest` binds: the parsed object, or the raw text
        if it is not a JSON object (so a malformed call is still shown exactly as sent)."""
        try:
            return self.parsed_arguments()
        except ValueError:
            return self.arguments

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ChatMessage(BaseModel):
    """A message of the conversation. Immutable so history can be shared without copying."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = Field(default=())
    tool_call_id: str | None = None
    name: str | None = None

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str, *, name: str | None = None) -> ChatMessage:
        return cls(role="user", content=content, name=name)

    @classmethod
    def assistant(cls, content: str | None, tool_calls: tuple[ToolCall, ...] = ()) -> ChatMessage:
        return cls(role="assistant", content=content, tool_calls=tool_calls)

    @classmethod
    def tool(cls, content: str, tool_call_id: str) -> ChatMessage:
        return cls(role="tool", content=content, tool_call_id=tool_call_id)

    def to_wire(self) -> dict[str, Any]:
        """The dict an OpenAI-compatible `/chat/completions` request carries."""
        out: dict[str, Any] = {"role": self.role}
        if self.role == "assistant" and self.tool_calls:
            out["content"] = self.content or None
            out["tool_calls"] = [tc.to_wire() for tc in self.tool_calls]
        else:
            out["content"] = self.content or ""
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "user":
            out["name"] = self.name
        return out

    def to_json(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ChatMessage:
        return cls.model_validate_json(text)


def canonical_arguments(arguments: Any) -> str:
    """One spelling for equal arguments: sorted keys, no spaces, UTF-8 kept."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return replace_lone_surrogates(text)


def call_digest(name: str, arguments: Any) -> str:
    """A short fingerprint of what exactly will run, shown on the approval card.

    Binding the human's decision to a visible digest makes a swapped call noticeable.
    """
    payload = f"{name}\n{canonical_arguments(arguments)}".encode()
    return hashlib.sha256(payload).hexdigest()[:12]
