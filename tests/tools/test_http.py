"""`http_request` against a real loopback aiohttp server: size cap, redirect bound, schemes,
methods, the time limit, and the argument-aware gate."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
from aiohttp import web

from agent_core import Tool, ToolCall, ToolError, ToolTimeout
from bot.tools import http_gate, make_http_request


@dataclass
class Server:
    base: str
    hits: list[str] = field(default_factory=list)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server(base="")
    never = asyncio.Event()

    async def record(request: web.Request) -> None:
        state.hits.append(f"{request.method} {request.path}")

    async def hello(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(text="hello", headers={"X-Secret-Header": "not shown"})

    async def echo(request: web.Request) -> web.Response:
        await record(request)
        payload = {
            "method": request.method,
            "body": await request.text(),
            "x_team": request.headers.get("X-Team"),
        }
        return web.json_response(payload)

    async def latin1(request: web.Request) -> web.Response:
        await record(request)
        charset = request.query.get("charset", "latin-1")
        body = "caf\u00e9".encode("latin-1")
        return web.Response(body=body, headers={"Content-Type": f"text/plain; charset={charset}"})

    async def endless(request: web.Request) -> web.StreamResponse:
        """A body with no end: the tool must stop reading on its own."""
        await record(request)
        response = web.StreamResponse()
        await response.prepare(request)
        chunk = b"x" * 16_384
        try:
            while True:
                await response.write(chunk)
        except (ConnectionError, asyncio.CancelledError):
            pass
        return response

    async def redirect(request: web.Request) -> web.Response:
        await record(request)
        left = int(request.match_info["n"])
        if left == 0:
            return web.Response(text="landed")
        raise web.HTTPFound(f"/redirect/{left - 1}")

    async def to_file(request: web.Request) -> web.Response:
        await record(request)
        raise web.HTTPFound("file:///etc/passwd")

    async def temporary(request: web.Request) -> web.Response:
        await record(request)
        raise web.HTTPTemporaryRedirect("/echo")

    async def slow(request: web.Request) -> web.Response:
        await record(request)
        await never.wait()
        return web.Response(text="never")

    app = web.Application()
    app.router.add_get("/hello", hello)
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/latin1", latin1)
    app.router.add_get("/endless", endless)
    app.router.add_get("/redirect/{n}", redirect)
    app.router.add_get("/to-file", to_file)
    app.router.add_route("*", "/temporary", temporary)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.base = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        never.set()  # let a parked /slow handler finish so shutdown need not wait for it
        await runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


@pytest.fixture
def http_tool(client: httpx.AsyncClient) -> Tool:
    return make_http_request(client=client, timeout=5, max_bytes=1_000, max_redirects=3)


def call(arguments: dict[str, object] | str) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id="c1", name="http_request", arguments=text)


async def test_get(server: Server, http_tool: Tool) -> None:
    result = await http_tool.invoke({"url": f"{server.base}/hello"})
    assert (
        result == "HTTP 200 OK\ncontent-type: text/plain; charset=utf-8\ncontent-length: 5\n\nhello"
    )
    assert server.hits == ["GET /hello"]


async def test_body_decoded_in_its_charset(server: Server, http_tool: Tool) -> None:
    assert (await http_tool.invoke({"url": f"{server.base}/latin1"})).endswith("\n\ncaf\u00e9")
    unknown = await http_tool.invoke({"url": f"{server.base}/latin1?charset=klingon"})
    assert unknown.endswith("\n\ncaf\ufffd")  # an unknown charset falls back to UTF-8


async def test_head_shows_no_body(server: Server, http_tool: Tool) -> None:
    result = await http_tool.invoke({"url": f"{server.base}/hello", "method": "head"})
    assert result.startswith("HTTP 200 OK\n")
    assert "hello" not in result
    assert server.hits == ["HEAD /hello"]


async def test_post_sends_body_and_headers(server: Server, http_tool: Tool) -> None:
    result = await http_tool.invoke(
        {
            "url": f"{server.base}/echo",
            "method": "POST",
            "headers": {"X-Team": "ops"},
            "body": "restart=web",
        }
    )
    body = json.loads(result.split("\n\n", 1)[1])
    assert body == {"method": "POST", "body": "restart=web", "x_team": "ops"}


async def test_response_size_capped_without_reading_the_rest(
    server: Server, http_tool: Tool
) -> None:
    result = await asyncio.wait_for(http_tool.invoke({"url": f"{server.base}/endless"}), 10)
    body = result.split("\n\n", 1)[1]
    assert body == "x" * 1_000 + "\n[... response cut at 1000 bytes; the rest was not read ...]"


async def test_redirects_followed_up_to_the_bound(server: Server, http_tool: Tool) -> None:
    result = await http_tool.invoke({"url": f"{server.base}/redirect/3"})
    assert result.startswith("HTTP 200 OK\nfinal URL (after 3 redirect(s)): ")
    assert result.endswith("\n\nlanded")

    server.hits.clear()
    with pytest.raises(ToolError, match=r"too many redirects \(more than 3\).*'/redirect/0'"):
        await http_tool.invoke({"url": f"{server.base}/redirect/4"})
    assert server.hits == [f"GET /redirect/{n}" for n in (4, 3, 2, 1)]


async def test_redirect_to_another_scheme_refused(server: Server, http_tool: Tool) -> None:
    with pytest.raises(ToolError, match="only http and https URLs are allowed, not scheme 'file'"):
        await http_tool.invoke({"url": f"{server.base}/to-file"})


async def test_unsafe_methods_do_not_follow_redirects(server: Server, http_tool: Tool) -> None:
    result = await http_tool.invoke(
        {"url": f"{server.base}/temporary", "method": "POST", "body": "x"}
    )
    assert result.startswith("HTTP 307 Temporary Redirect\n")
    assert "location: /echo" in result
    assert server.hits == ["POST /temporary"]  # the approved URL only, never /echo


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file:///etc/passwd", "not scheme 'file'"),
        ("ftp://example.com/x", "not scheme 'ftp'"),
        ("gopher://127.0.0.1:70/", "not scheme 'gopher'"),
        ("example.com/x", "not scheme '(none)'"),
        ("http:///path-only", "has no host"),
    ],
)
async def test_only_http_urls(http_tool: Tool, url: str, expected: str) -> None:
    with pytest.raises(ToolError) as caught:
        await http_tool.invoke({"url": url})
    assert expected in str(caught.value)


async def test_unknown_method_refused(server: Server, http_tool: Tool) -> None:
    with pytest.raises(ToolError, match="unsupported method 'BREW'"):
        await http_tool.invoke({"url": f"{server.base}/hello", "method": "BREW"})
    assert server.hits == []


async def test_time_limit(server: Server, client: httpx.AsyncClient) -> None:
    tool = make_http_request(client=client, timeout=0.3)
    with pytest.raises(ToolTimeout, match=r"GET .*/slow timed out after 0.3s"):
        await asyncio.wait_for(tool.invoke({"url": f"{server.base}/slow"}), 10)


async def test_connection_failure_is_a_tool_error(http_tool: Tool) -> None:
    with pytest.raises(ToolError, match="failed: ConnectError"):
        await http_tool.invoke({"url": "http://127.0.0.1:9/"})


def test_tool_is_risky_without_a_gate(client: httpx.AsyncClient) -> None:
    tool = make_http_request(client=client)
    assert tool.name == "http_request"
    assert tool.requires_approval() is True
    assert tool.parameters["required"] == ["url"]


@pytest.mark.parametrize(
    ("arguments", "gated"),
    [
        ({"url": "http://x"}, False),
        ({"url": "http://x", "method": "GET"}, False),
        ({"url": "http://x", "method": "head"}, False),
        ({"url": "http://x", "method": " GET "}, False),
        ({"url": "http://x", "method": "POST"}, True),
        ({"url": "http://x", "method": "delete"}, True),
        ({"url": "http://x", "method": "OPTIONS"}, True),
        ({"url": "http://x", "method": 5}, True),
        ('{"url": "http://x"', True),
        ("[1]", True),
    ],
)
def test_http_gate(arguments: dict[str, object] | str, gated: bool) -> None:
    assert http_gate(call(arguments)) is gated
