"""A small MCP server for tests, written with the SDK's MCPServer (formerly FastMCP).

Usage: python demo_server.py                       (stdio)
       python demo_server.py --http --token TOKEN  (streamable HTTP on 127.0.0.1, a free port;
                                                   prints "listening <port>" once it accepts)

Tools: a read-only one, a destructive one, one that prints its environment, one that crashes
the process, one that records each call in $DEMO_CALL_LOG (to count deliveries), one that
fails, one with structured output, one that never answers (and, with $DEMO_HANG_EVENTS, says
on that fifo when it starts and when it is cancelled; with DEMO_HANG=freeze it blocks the whole
process, so that not even a ping is answered), one that records its call and then never answers
(telling the test through a fifo), and one with long output.
Standalone on purpose (imports only the SDK), so it runs with the scrubbed environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("demo")


@server.tool(
    title="Service status",
    annotations=ToolAnnotations(read_only_hint=True),
)
def status(service: str = "web") -> str:
    """Report whether a service is up."""
    return f"{service} is up"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_release(release: str, namespace: str = "default") -> str:
    """Delete a release."""
    return f"deleted {release} in {namespace}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def environment() -> str:
    """The server process's environment, as JSON."""
    return json.dumps(dict(os.environ), sort_keys=True)


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    sys.stdout.flush()
    os._exit(3)


@server.tool()
def record(note: str) -> str:
    """Append the note to $DEMO_CALL_LOG, one line per delivered call."""
    with open(os.environ["DEMO_CALL_LOG"], "a", encoding="utf-8") as log:
        log.write(note + "\n")
    return f"recorded {note}"


def _record_and_announce(note: str) -> None:
    with open(os.environ["DEMO_CALL_LOG"], "a", encoding="utf-8") as log:
        log.write(note + "\n")
    with open(os.environ["DEMO_STARTED"], "w", encoding="utf-8") as fifo:
        fifo.write("started\n")


@server.tool()
async def record_and_wait(note: str) -> str:
    """Append the note to $DEMO_CALL_LOG, say so on the $DEMO_STARTED fifo, never answer."""
    await asyncio.to_thread(_record_and_announce, note)
    await asyncio.Event().wait()
    return "unreachable"


@server.tool()
def fail(reason: str) -> str:
    """Fail with the given reason (the server reports isError)."""
    raise ValueError(reason)


@server.tool()
def inventory() -> dict[str, Any]:
    """Structured output: hosts and their roles."""
    return {"hosts": ["a", "b"], "count": 2}


def _hang_event(event: str) -> None:
    """One line on the $DEMO_HANG_EVENTS fifo (opened for reading by the test beforehand, so
    the write neither blocks nor fails)."""
    path = os.environ.get("DEMO_HANG_EVENTS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, f"{event} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


@server.tool()
async def hang() -> str:
    """Never answers."""
    _hang_event("started")
    if os.environ.get("DEMO_HANG") == "freeze":
        time.sleep(3600)  # noqa: ASYNC251 -- on purpose: no ping, no cancellation is read
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        _hang_event("cancelled")  # the client's notifications/cancelled reached this call
        raise
    return "unreachable"


@server.tool()
def shout(size: int) -> str:
    """`size` characters of output: the head is H, the tail T."""
    return "H" * (size // 2) + "T" * (size - size // 2)


async def _serve_http(token: str) -> None:
    import uvicorn
    from starlette.responses import PlainTextResponse

    app = server.streamable_http_app()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        """Every HTTP request must carry the bearer token (the client sends it as a header)."""
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                response = PlainTextResponse("missing or wrong token", status_code=401)
                await response(scope, receive, send)
                return
        await app(scope, receive, send)

    # Bound and listening before the port is announced: a client that connects before uvicorn
    # accepts waits in the backlog, so the announcement needs no readiness polling.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    print(f"listening {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        asyncio.run(_serve_http(sys.argv[sys.argv.index("--token") + 1]))
    else:
        server.run()
