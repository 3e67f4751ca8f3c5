"""Running one tool: its errors become the model's error result, its duration is measured, and
`current_call_id` names the call while it runs (for logs and wrappers)."""

from __future__ import annotations

import logging
import time
from typing import Any

from .exceptions import ToolError
from .messages import ToolCall
from .tools import Tool, _to_text, current_call_id

__all__ = ["_invoke"]

logger = logging.getLogger("agent_core")


async def _invoke(call: ToolCall, tool: Tool, arguments: dict[str, Any]) -> tuple[str, bool, float]:
    """Run the tool (`current_call_id` names the call meanwhile); whatever it raises becomes an
    error result for the model. Also returns the seconds it ran."""
    token, started = current_call_id.set(call.id), time.monotonic()
    try:
        result: object = await tool.invoke(arguments)
        content, is_error = _to_text(result), False  # _to_text also replaces lone surrogates
    except ToolError as exc:
        content, is_error = f"Error: {exc}", True
    except Exception as exc:
        logger.exception("tool %r raised", call.name)
        content, is_error = f"Error: tool {call.name!r} failed: {type(exc).__name__}: {exc}", True
    finally:
        current_call_id.reset(token)
    return _to_text(content), is_error, time.monotonic() - started
