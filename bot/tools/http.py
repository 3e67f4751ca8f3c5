"""`http_request`: an HTTP call made for the model, bounded in time, size and redirects.

Reading is safe, writing is not: GET and HEAD need no approval, any other method does. The loop
asks `approval_gate(tool, call)`, so the distinction lives in `http_gate` (and in the default
policy); the tool's own `requires_approval()` says True, the safe answer when no gate looks at
the arguments. Only a GET or HEAD follows redirects: a request a human approved for one URL is
never replayed against another.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import httpx
from pydantic import Field

from agent_core import Tool, ToolCall, ToolError, ToolTimeout, tool

__all__ = ["SAFE_METHODS", "http_gate", "make_http_request"]

SAFE_METHODS = frozenset({"GET", "HEAD"})
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_SCHEMES = frozenset({"http", "https"})
_SHOWN_HEADERS = ("content-type", "content-length", "location")


def _normalise_method(method: str) -> str:
    """The method as the tool sends it; the gate and the tool must agree on this spelling."""
    return method.strip().upper()


def http_gate(call: ToolCall) -> bool:
    """Whether this `http_request` call must wait for a human: any method but GET or HEAD.

    Arguments that cannot be read are treated as risky.
    """
    try:
        method = call.parsed_arguments().get("method", "GET")
    except ValueError:
        return True
    return not isinstance(method, str) or _normalise_method(method) not in SAFE_METHODS


def _checked_url(url: str | httpx.URL) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ToolError(f"{str(url)!r} is not a valid URL: {exc}") from None
    if parsed.scheme not in _SCHEMES:
        shown = parsed.scheme or "(none)"
        raise ToolError(f"only http and https URLs are allowed, not scheme {shown!r}: {str(url)!r}")
    if not parsed.host:
        raise ToolError(f"the URL {str(url)!r} has no host")
    return parsed


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """At most `max_bytes` of the body; True when there was more (the rest is never read)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            return bytes(body[:max_bytes]), True
    return bytes(body), False


def _decode(body: bytes, charset: str | None) -> str:
    """Text of a body in its declared charset; an unknown or missing charset means UTF-8."""
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def _describe(response: httpx.Response, redirects: int, body: bytes, truncated: bool) -> str:
    lines = [f"HTTP {response.status_code} {response.reason_phrase}".rstrip()]
    if redirects:
        lines.append(f"final URL (after {redirects} redirect(s)): {response.url}")
    lines += [
        f"{name}: {response.headers[name]}" for name in _SHOWN_HEADERS if name in response.headers
    ]
    if response.request.method != "HEAD":
        text = _decode(body, response.charset_encoding)
        lines += ["", text]
        if truncated:
            lines.append(f"[... response cut at {len(body)} bytes; the rest was not read ...]")
    return "\n".join(lines)


async def _send(
    client: httpx.AsyncClient,
    request: httpx.Request,
    *,
    max_bytes: int,
    max_redirects: int,
) -> str:
    follow = request.method in SAFE_METHODS
    redirects = 0
    while True:
        response = await client.send(request, stream=True, follow_redirects=False)
        try:
            if follow and response.is_redirect and response.next_request is not None:
                if redirects >= max_redirects:
                    raise ToolError(
                        f"too many redirects (more than {max_redirects}); "
                        f"the last one pointed to {response.headers.get('location', '?')!r}"
                    )
                request = response.next_request
                _checked_url(request.url)
                redirects += 1
                continue
            body, truncated = await _read_capped(response, max_bytes)
            return _describe(response, redirects, body, truncated)
        finally:
            await response.aclose()


def make_http_request(
    *,
    client: httpx.AsyncClient,
    timeout: float = 15,
    max_bytes: int = 100_000,
    max_redirects: int = 5,
) -> Tool:
    """Build the `http_request` tool on `client` (which the caller owns and closes).

    `timeout` bounds the whole call, redirects and body included; at most `max_bytes` of the
    body are read; GET and HEAD follow at most `max_redirects` redirects.
    """
    if timeout <= 0:
        raise ValueError(f"http_request timeout must be positive, not {timeout!r}")
    if max_bytes < 0 or max_redirects < 0:
        raise ValueError("http_request max_bytes and max_redirects cannot be negative")
    description = (
        "Make an HTTP request and return the status, a few headers and the body (at most "
        f"{max_bytes} bytes). GET and HEAD run at once; other methods wait for a human's "
        "approval. Only http and https URLs."
    )

    @tool(name="http_request", description=description, requires_approval=True)
    async def http_request(
        url: Annotated[str, Field(description="An http:// or https:// URL.")],
        method: Annotated[str, Field(description="GET, HEAD, POST, PUT, PATCH, DELETE.")] = "GET",
        headers: dict[str, str] | None = None,
        body: Annotated[str | None, Field(description="The request body, as text.")] = None,
    ) -> str:
        verb = _normalise_method(method)
        if verb not in _METHODS:
            raise ToolError(
                f"unsupported method {method!r}; use one of {', '.join(sorted(_METHODS))}"
            )
        target = _checked_url(url)
        try:
            request = client.build_request(
                verb, target, headers=headers, content=body, timeout=timeout
            )
            async with asyncio.timeout(timeout):
                return await _send(
                    client, request, max_bytes=max_bytes, max_redirects=max_redirects
                )
        except (TimeoutError, httpx.TimeoutException):
            raise ToolTimeout(f"{verb} {target} timed out after {timeout:g}s", timeout) from None
        except httpx.HTTPError as exc:
            raise ToolError(f"{verb} {target} failed: {type(exc).__name__}: {exc}") from None

    return http_request
