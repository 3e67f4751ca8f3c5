"""`LLMStandIn`: a real loopback HTTP server that answers like an OpenAI-compatible provider.

Tests queue replies (FIFO, one per request) and then drive the real client against
`llm.base_url`. Every request body is recorded in `requests`; a request that finds no reply
queued gets HTTP 500 and is recorded in `unexpected`, so a test can assert it never happened.

    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "restart", {"service": "web"})])
        llm.reply_text("Done.")
        ...
        assert llm.unexpected == []
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from tests.support.llm_context import context_error, prompt_tokens
from tests.support.loopback import serve_on_loopback

__all__ = ["FIXTURES", "LLMStandIn", "fixture_bytes", "sse_bytes"]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openai-sse"

Handler = Callable[[dict[str, Any]], Awaitable[web.StreamResponse]]
"""`reply_with` escape hatch: gets the request JSON, returns the response to send."""

_Reply = Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def sse_bytes(chunks: Iterable[dict[str, Any]], *, done: bool = True) -> bytes:
    """`data: <json>\\n\\n` per chunk, then `data: [DONE]\\n\\n` unless `done` is false."""
    out = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return out + (b"data: [DONE]\n\n" if done else b"")


def fixture_bytes(name: str) -> bytes:
    """A fixture as it goes on the wire (see tests/fixtures/openai-sse and its README rules).

    `*.sse.txt` is sent as it is; `*.chunks.txt` is one JSON chunk per line after a `#` header,
    each sent as `data: <line>\\n\\n`, then `data: [DONE]\\n\\n`.
    """
    raw = (FIXTURES / name).read_bytes()
    if name.endswith(".sse.txt"):
        return raw
    if name.endswith(".chunks.txt"):
        lines = [line.strip() for line in raw.splitlines()]
        payloads = [line for line in lines if line and not line.startswith(b"#")]
        return b"".join(b"data: " + p + b"\n\n" for p in payloads) + b"data: [DONE]\n\n"
    raise ValueError(f"fixture {name!r} is neither *.sse.txt nor *.chunks.txt")


class LLMStandIn:
    """An OpenAI-compatible provider on 127.0.0.1, for tests. Use it as an async context manager."""

    def __init__(self, *, model: str = "stand-in-model", context_limit: int | None = None) -> None:
        self.model = model
        self.context_limit = context_limit
        """Tokens a request may hold; a longer one gets OpenAI's HTTP 400 `context_length_exceeded`
        (consuming no reply) and is recorded in `refused`."""
        self.refused: list[dict[str, Any]] = []
        self.base_url = ""
        self.requests: list[dict[str, Any]] = []
        """JSON bodies received at /v1/chat/completions, in order."""
        self.headers: list[dict[str, str]] = []
        """The headers of each of those requests (same order), e.g. to check `Authorization`."""
        self.unexpected: list[dict[str, Any]] = []
        """Bodies of requests that found no reply queued (they were answered HTTP 500)."""
        self._replies: deque[_Reply] = deque()
        self._arrived = asyncio.Condition()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> LLMStandIn:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        self._runner, base = await serve_on_loopback(app, shutdown_timeout=1.0)
        self.base_url = f"{base}/v1"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closing.set()  # frees replies held by `reply_text_gated`
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- queueing replies --------------------------------------------------------------------

    @property
    def queued(self) -> int:
        """Replies queued and not yet consumed."""
        return len(self._replies)

    def reply_text(
        self, text: str, *, chunk_size: int = 8, usage: tuple[int, int] | None = None
    ) -> None:
        """A streamed text answer in `chunk_size` pieces, finish `stop`, usage, `[DONE]`.

        `usage` is (prompt_tokens, completion_tokens); by default (10, number of pieces).
        """
        pieces = _split(text, chunk_size)

        async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            chunks = self._text_chunks(body, pieces)
            chunks.append(self._finish_chunk(body, "stop"))
            chunks.append(self._usage_chunk(body, usage or (10, len(pieces))))
            return await self._stream(request, chunks, done=True)

        self._replies.append(reply)

    def reply_tool_calls(
        self,
        calls: list[tuple[str, str, dict[str, Any] | str]],
        text: str = "",
        *,
        fragment: int | None = None,
    ) -> None:
        """A tool-call turn: optional text, then each call streamed OpenAI-style.

        Each call is (call_id, name, arguments) with arguments a dict (sent as JSON) or the raw
        argument text; the arguments are split in two, or in `fragment`-character pieces (real
        OpenAI streams send about 4).
        """
        prepared = [
            (i, cid, name, a if isinstance(a, str) else json.dumps(a))
            for i, (cid, name, a) in enumerate(calls)
        ]

        async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            chunks = self._text_chunks(body, _split(text, 8))
            for index, call_id, name, arguments in prepared:
                head = {
                    "index": index,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
                chunks.append(self._delta_chunk(body, {"tool_calls": [head]}))
                half = len(arguments) // 2
                parts = [arguments[:half], arguments[half:]]
                for part in _split(arguments, fragment) if fragment else parts:
                    if part:
                        piece = {"index": index, "function": {"arguments": part}}
                        chunks.append(self._delta_chunk(body, {"tool_calls": [piece]}))
            chunks.append(self._finish_chunk(body, "tool_calls"))
            chunks.append(self._usage_chunk(body, (20, 5 * len(prepared))))
            return await self._stream(request, chunks, done=True)

        self._replies.append(reply)

    def reply_raw(
        self,
        body: bytes,
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        chunk_size: int | None = None,
    ) -> None:
        """Serve `body` byte for byte (as `text/event-stream` unless `headers` say otherwise).

        With `chunk_size`, the body is written in pieces of that many bytes, so a frame (or a
        CRLF) can straddle two network writes.
        """
        sent_headers = {"Content-Type": "text/event-stream", **(headers or {})}

        async def reply(request: web.Request, _: dict[str, Any]) -> web.StreamResponse:
            if chunk_size is None:
                return web.Response(body=body, status=status, headers=sent_headers)
            response = web.StreamResponse(status=status, headers=sent_headers)
            await response.prepare(request)
            for start in range(0, len(body), chunk_size):
                await response.write(body[start : start + chunk_size])
            await response.write_eof()
            return response

        self._replies.append(reply)

    def reply_chunks(self, chunks: list[dict[str, Any]], *, done: bool = True) -> None:
        """Stream the given chunks as `data: <json>\\n\\n` each, then `[DONE]` if `done`."""
        frozen = json.loads(json.dumps(chunks))

        async def reply(request: web.Request, _: dict[str, Any]) -> web.StreamResponse:
            return await self._stream(request, frozen, done=done)

        self._replies.append(reply)

    def reply_status(
        self,
        status: int,
        body: dict[str, Any] | str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """A plain (non-streamed) answer; `None` body means an OpenAI-style error body."""
        if body is None:
            body = {
                "error": {
                    "message": f"stand-in answered HTTP {status}",
                    "type": "stand_in",
                    "code": None,
                }
            }
        if isinstance(body, dict):
            payload, content_type = json.dumps(body).encode(), "application/json"
        else:
            payload, content_type = body.encode(), "text/plain"
        sent_headers = {"Content-Type": content_type, **(headers or {})}

        async def reply(request: web.Request, _: dict[str, Any]) -> web.StreamResponse:
            return web.Response(body=payload, status=status, headers=sent_headers)

        self._replies.append(reply)

    def reply_fixture(self, name: str, *, chunk_size: int | None = None) -> None:
        """A capture from tests/fixtures/openai-sse/, served by the fixtures README rules."""
        self.reply_raw(fixture_bytes(name), chunk_size=chunk_size)

    def reply_with(self, handler: Handler) -> None:
        """Escape hatch: `handler(request_json)` builds the whole response.

        To stream, return `web.Response(body=<async iterator of bytes>)`: aiohttp sends it chunked.
        """

        async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            return await handler(body)

        self._replies.append(reply)

    def reply_text_gated(
        self, text: str, release: asyncio.Event, *, chunk_size: int = 8
    ) -> asyncio.Event:
        """Like `reply_text`, but after the first text piece the reply waits for `release`.

        Lets a test look at a run mid-stream without sleeping. Returns an event set once the
        first piece has been sent. Closing the server also ends the wait.
        """
        pieces = _split(text, chunk_size)
        first_sent = asyncio.Event()

        async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            chunks = self._text_chunks(body, pieces)
            response = await self._start_stream(request)
            head, rest = chunks[:2], chunks[2:]  # the role chunk and the first text piece
            await self._write_chunks(response, head)
            first_sent.set()
            await self._wait_for(release)
            if self._closing.is_set() and not release.is_set():
                return response
            rest += [self._finish_chunk(body, "stop"), self._usage_chunk(body, (10, len(pieces)))]
            await self._write_chunks(response, rest)
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response

        self._replies.append(reply)
        return first_sent

    def fail_midstream(
        self,
        text_before: str,
        *,
        message: str = "The server had an error while processing your request.",
        chunk_size: int = 8,
    ) -> None:
        """Stream `text_before`, then an OpenAI-style top-level `error` chunk, and close."""
        pieces = _split(text_before, chunk_size)

        async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            chunks = self._text_chunks(body, pieces)
            chunks.append({"error": {"message": message, "type": "server_error", "code": None}})
            return await self._stream(request, chunks, done=False)

        self._replies.append(reply)

    def reply_keepalive(self, text_before: str = "", *, interval: float = 0.02) -> asyncio.Event:
        """Stream `text_before`, then only SSE keep-alive comments (`: keep-alive`) every
        `interval` seconds, for ever: a stream no read timeout ends. The returned event is set
        once the client has hung up (so the test sees the connection was released)."""
        pieces = _split(text_before, 8) if text_before else []
        hung_up = asyncio.Event()

        async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            response = await self._start_stream(request)
            await self._write_chunks(response, self._text_chunks(body, pieces))
            try:
                while not self._closing.is_set():
                    await response.write(b": keep-alive\n\n")
                    await asyncio.sleep(interval)  # pacing the comments, not synchronising
            except ConnectionResetError:
                hung_up.set()
            except asyncio.CancelledError:
                hung_up.set()
                raise
            return response

        self._replies.append(reply)
        return hung_up

    # -- waiting -----------------------------------------------------------------------------

    async def wait_for_requests(
        self,
        n: int,
        timeout: float = 10,
    ) -> list[dict[str, Any]]:
        """The first `n` request bodies, once they have arrived."""

        async def arrived() -> None:
            async with self._arrived:
                await self._arrived.wait_for(lambda: len(self.requests) >= n)

        try:
            await asyncio.wait_for(arrived(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"LLMStandIn got {len(self.requests)} request(s) within {timeout}s, expected {n}"
            ) from None
        return self.requests[:n]

    # -- serving -----------------------------------------------------------------------------

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(
                {"error": {"message": "LLMStandIn: request body is not JSON", "type": "invalid"}},
                status=400,
            )
        if self.context_limit is not None and (used := prompt_tokens(body)) > self.context_limit:
            self.refused.append(body)
            return web.json_response(context_error(self.context_limit, used), status=400)
        async with self._arrived:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            self._arrived.notify_all()
        if not self._replies:
            self.unexpected.append(body)
            message = (
                f"LLMStandIn: no reply queued for request #{len(self.requests)} "
                "(queue one with reply_text/reply_tool_calls/...)"
            )
            return web.json_response(
                {"error": {"message": message, "type": "stand_in_unexpected"}}, status=500
            )
        reply = self._replies.popleft()
        return await reply(request, body)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "test"}]}
        )

    async def _wait_for(self, release: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(release.wait()), asyncio.ensure_future(self._closing.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _start_stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=_SSE_HEADERS)
        await response.prepare(request)
        return response

    async def _write_chunks(
        self, response: web.StreamResponse, chunks: list[dict[str, Any]]
    ) -> None:
        for chunk in chunks:
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

    async def _stream(
        self, request: web.Request, chunks: list[dict[str, Any]], *, done: bool
    ) -> web.StreamResponse:
        response = await self._start_stream(request)
        await self._write_chunks(response, chunks)
        if done:
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    # -- chunk builders ----------------------------------------------------------------------

    def _envelope(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-standin-{len(self.requests)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", self.model),
        }

    def _delta_chunk(self, body: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return {**self._envelope(body), "choices": [choice]}

    def _text_chunks(self, body: dict[str, Any], pieces: list[str]) -> list[dict[str, Any]]:
        chunks = [self._delta_chunk(body, {"role": "assistant", "content": ""})]
        chunks += [self._delta_chunk(body, {"content": piece}) for piece in pieces]
        return chunks

    def _finish_chunk(self, body: dict[str, Any], reason: str) -> dict[str, Any]:
        choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}
        return {**self._envelope(body), "choices": [choice]}

    def _usage_chunk(self, body: dict[str, Any], usage: tuple[int, int]) -> dict[str, Any]:
        prompt, completion = usage
        totals = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        return {**self._envelope(body), "choices": [], "usage": totals}


def _split(text: str, size: int) -> list[str]:
    if size < 1:
        raise ValueError(f"chunk_size must be at least 1, not {size!r}")
    return [text[i : i + size] for i in range(0, len(text), size)]
