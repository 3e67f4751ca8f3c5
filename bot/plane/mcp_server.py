"""`opsgate mcp-serve`: an MCP server on stdio (the official SDK) whose one tool,
`request_approval`, asks OpsGate for a decision (as `opsgate ask` does, through
`OPSGATE_URL` and `OPSGATE_CLIENT_TOKEN`) and blocks until it is made."""

from __future__ import annotations

import asyncio
from typing import Any

from mcp.server.mcpserver import MCPServer

from bot.errors import PlaneClientError

from .client import ask_and_wait

__all__ = ["request_approval", "serve_mcp", "server"]

server = MCPServer("opsgate", instructions="Ask OpsGate for a human approval in Slack.")


@server.tool()
async def request_approval(
    tool: str, arguments: dict[str, Any], reason: str | None = None
) -> dict[str, Any]:
    """Ask people in Slack to approve one tool call before you make it; blocks until they
    decide. `state` is approved, allowed (no approval needed), rejected, forbidden or expired;
    only approved and allowed mean go ahead. `receipt` proves the approval."""
    body: dict[str, Any] = {"tool": tool, "arguments": arguments}
    if reason:
        body["reason"] = reason
    try:
        asked = await asyncio.to_thread(ask_and_wait, body)
    except PlaneClientError as exc:
        return {"state": "error", "reason": str(exc), "receipt": None}
    answer = asked.answer
    return {
        "state": answer.get("state"),
        "reason": answer.get("reason"),
        "decided_by": answer.get("decided_by") or [],
        "receipt": answer.get("receipt"),
    }


def serve_mcp() -> int:
    server.run("stdio")
    return 0
