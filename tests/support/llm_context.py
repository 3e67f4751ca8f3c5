"""The LLM stand-in's context window: counting a request, and OpenAI's refusal of a long one."""

from __future__ import annotations

import functools
import json
from typing import Any

from agent_core.context import BpeCounter

__all__ = ["context_error", "prompt_tokens"]


@functools.cache
def _o200k() -> BpeCounter:
    return BpeCounter("o200k_base")


def prompt_tokens(body: dict[str, Any]) -> int:
    """What a request holds, in o200k_base tokens (OpenAI's current encoding): message texts,
    tool-call names and arguments, tool definitions, plus 4 per message and call."""
    counter = _o200k()
    total = 3
    for message in body.get("messages", []):
        total += 4 + counter.count(str(message.get("content") or ""))
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            total += 4 + counter.count(function.get("name", "") + function.get("arguments", ""))
    if body.get("tools"):
        total += counter.count(json.dumps(body["tools"], separators=(",", ":")))
    return total


def context_error(limit: int, used: int) -> dict[str, Any]:
    """OpenAI's answer (HTTP 400) to a request longer than the model's window."""
    return {
        "error": {
            "message": (
                f"This model's maximum context length is {limit} tokens. However, your "
                f"messages resulted in {used} tokens. Please reduce the length of the messages."
            ),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
