"""The demo model: an OpenAI-compatible streaming endpoint served by the workspace itself, so the
agent loop (tool calls, approvals, resumes) is the real one without a model to configure.

It is not a language model: it runs what the last message says after `run:` (one
`run_command` call), reports what the tool answered, and otherwise explains the flow. Every
answer says it comes from the demo model.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections.abc import Iterator, Mapping
from typing import Any

from aiohttp import web

__all__ = ["DEMO_MODEL", "DEMO_NOTE", "DemoModel", "demo_reply"]

DEMO_MODEL = "opsgate-demo"
DEMO_NOTE = "demo model: it runs what you write after `run:`, and explains the flow otherwise"
"""Said on the page and first in every answer."""

_RUN = re.compile(r"\brun:\s*(.+)", re.IGNORECASE | re.DOTALL)
_OUTPUT_SHOWN = 1500

EXPLAIN = """\
Try `run: df -h` (a free read: it runs at once), `run: systemctl restart nginx` (a card: \
an approver decides), or `run: rm -rf /tmp/cache` (two approvers, with a preview of what it \
would remove). `run: rm -rf /` is forbidden by the policy and never runs. Switch people at the \
top left to approve as someone else: the requester cannot approve their own call."""


AFTER = """\
That is the whole flow: the model asked for a tool call, the policy decided whether a person \
had to approve it, and the decision is in the audit log (`opsgate audit`). Write `run:` and \
another command to go on."""


def _text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content or "")


def demo_reply(messages: list[Mapping[str, Any]], tools: list[str]) -> tuple[str, str | None]:
    """(text, command): what the demo model answers to `messages`; `command` is the
    `run_command` call it makes (None: it answers in words only)."""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        result = _text_of(last).strip()
        if len(result) > _OUTPUT_SHOWN:
            result = result[:_OUTPUT_SHOWN] + "\n…"
        said = f"The tool answered:\n```\n{result or '(nothing)'}\n```\n{AFTER}"
        return f"_{DEMO_NOTE}_\n\n{said}", None
    asked = _text_of(last) if last.get("role") == "user" else ""
    found = _RUN.search(asked)
    command = found.group(1).strip().splitlines()[0].strip("` ") if found else ""
    if command and "run_command" in tools:
        return f"_{DEMO_NOTE}_\n\nRunning `{command}`.", command
    return f"_{DEMO_NOTE}_\n\n{EXPLAIN}", None


def _pieces(text: str) -> Iterator[str]:
    """The answer in pieces of a few words, so that it grows on the page as a model's does."""
    words = re.findall(r"\S+\s*|\s+", text)
    for start in range(0, len(words), 3):
        yield "".join(words[start : start + 3])


class DemoModel:
    """`GET /demo/v1/models` and `POST /demo/v1/chat/completions` (streaming)."""

    PREFIX = "/demo/v1"

    def __init__(self, *, pace: float = 0.06) -> None:
        self.pace = pace
        """Seconds between pieces of an answer."""

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(f"{self.PREFIX}/models", self._models),
            web.post(f"{self.PREFIX}/chat/completions", self._completions),
        ]

    async def _models(self, request: web.Request) -> web.Response:
        entry = {
            "id": DEMO_MODEL,
            "object": "model",
            "owned_by": "opsgate",
            "context_length": 32768,
        }
        return web.json_response({"object": "list", "data": [entry]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tools = [
            str((t.get("function") or {}).get("name"))
            for t in body.get("tools") or []
            if isinstance(t, Mapping)
        ]
        text, command = demo_reply(list(body.get("messages") or []), tools)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        chunk_id = f"chatcmpl-{secrets.token_hex(6)}"

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": DEMO_MODEL,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        await send({"role": "assistant", "content": ""})
        for piece in _pieces(text):
            await send({"content": piece})
            await asyncio.sleep(self.pace)  # the pace of the demo's "typing", not a wait
        if command is not None:
            call = {
                "index": 0,
                "id": f"call_{secrets.token_hex(6)}",
                "type": "function",
                "function": {"name": "run_command", "arguments": json.dumps({"command": command})},
            }
            await send({"tool_calls": [call]})
        await send({}, "tool_calls" if command is not None else "stop")
        usage = {"prompt_tokens": 100, "completion_tokens": len(text) // 4, "total_tokens": 0}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        final: dict[str, Any] = {"id": chunk_id, "object": "chat.completion.chunk"}
        final["model"] = DEMO_MODEL
        final |= {"created": int(time.time()), "choices": [], "usage": usage}
        await response.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response
