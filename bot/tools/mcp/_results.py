"""A `tools/call` result as the text the model reads: text joined, structured content as JSON,
other content named, and the whole capped (head and tail kept, the cut counted)."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

__all__ = ["cap", "result_text"]


def cap(text: str, limit: int) -> str:
    """Keep the head and the tail of `text` within `limit` characters and say what was cut."""
    if len(text) <= limit:
        return text
    head = limit - limit // 2
    tail = limit // 2
    cut = len(text) - head - tail
    return (
        f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail :] if tail else ''}"
    )


def _block_text(block: Any) -> str:
    match block:
        case types.TextContent(text=text):
            return str(text)
        case types.ImageContent(mime_type=mime):
            return f"[image content ({mime}) not shown]"
        case types.AudioContent(mime_type=mime):
            return f"[audio content ({mime}) not shown]"
        case types.ResourceLink(uri=uri):
            return f"[resource link: {uri}]"
        case types.EmbeddedResource(resource=types.TextResourceContents(uri=uri, text=text)):
            return f"[resource {uri}]\n{text}"
        case types.EmbeddedResource(resource=resource):
            return f"[binary resource {getattr(resource, 'uri', '')} not shown]"
        case _:
            return f"[{getattr(block, 'type', type(block).__name__)} content not shown]"


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def _already_said(parts: list[str], structured: Any) -> bool:
    """Servers usually send structured content twice: also as a JSON text block, or (SDK
    servers returning a plain value) as the text of `{"result": value}`."""
    if any(_same_json(p, structured) for p in parts):
        return True
    if isinstance(structured, dict) and set(structured) == {"result"}:
        value = structured["result"]
        return "\n".join(parts) == (value if isinstance(value, str) else json.dumps(value))
    return False


def result_text(result: types.CallToolResult, limit: int) -> str:
    """The model-facing text of `result` (the caller looks at `is_error` itself)."""
    parts = [_block_text(block) for block in result.content]
    structured = result.structured_content
    if structured is not None and not _already_said(parts, structured):
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    return cap("\n".join(parts), limit)
