"""A tool in a few words for the people deciding on its card.

A tool's `description` is written for the model (what it returns, its limits, how to call
it); an approver needs one line saying what it does. A tool may carry a `summary` attribute;
the built-ins have one here; anything else shows the first sentence of its description.
"""

from __future__ import annotations

import re
from typing import Final

from agent_core import Tool

__all__ = ["BUILT_IN_SUMMARIES", "tool_summary"]

BUILT_IN_SUMMARIES: Final = {
    "run_command": "Runs a shell command on the operations host.",
    "http_request": "Sends an HTTP request.",
}

_SUMMARY_MAX = 160
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def tool_summary(tool: Tool) -> str:
    """One line about `tool` for people: its `summary`, a built-in's, or its first sentence."""
    own = getattr(tool, "summary", None)
    if isinstance(own, str) and own.strip():
        return own.strip()
    if tool.name in BUILT_IN_SUMMARIES:
        return BUILT_IN_SUMMARIES[tool.name]
    first = _SENTENCE_END.split(tool.description.strip(), maxsplit=1)[0].strip()
    if len(first) > _SUMMARY_MAX:
        first = first[: _SUMMARY_MAX - 1].rstrip() + "…"
    return first
