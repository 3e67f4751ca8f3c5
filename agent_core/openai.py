"""`OpenAIChatClient`: a `ChatClient` for any OpenAI-compatible `/chat/completions` endpoint.

It streams (SSE via httpx-sse), asks for usage in the stream, and retries only what is safe to
retry: connection failures and 408/409/429/5xx answers, before any byte of the stream was read.
Once the stream has started, a failure is raised, never retried, because the consumer may already
have shown part of the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx
from httpx_sse import EventSource, aconnect_sse

from ._sse import ChunkAssembler, error_code, error_details, error_kind, shorten
from .chat_client import ChatOptions
from .exceptions import ChatClientError, ProviderError, StreamError
from .messages import (
    ChatMessage,
    ChatUpdate,
    ToolCallEnded,
    ToolCallStarted,
    replace_lone_surrogates_in,
)
from .tools import FunctionTool, Tool

__all__ = ["OpenAIChatClient"]

logger = logging.getLogger("agent_core.openai")

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_MAX_SERVER_DELAY = 60.0
"""A `retry-after` longer than this is not waited for; our own backoff is used instead."""

Sleep = Callable[[float], Awaitable[object]]


class _Retry(Exception):
    """Internal: this attempt failed in a way worth another try after `delay` seconds."""

    def __init__(self, error: ChatClientError, delay: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.delay = delay


class OpenAIChatClient:
    """Streams model turns from an OpenAI-compatible endpoint (OpenAI, Azure, vLLM, Ollama, …).

    The `httpx.AsyncClient` is injected and not closed here: its owner decides its lifetime,
    proxies and limits. `sleep` is injectable so tests can observe retry delays without waiting.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        model: str,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        sleep: Sleep = asyncio.sleep,
        timeout: httpx.Timeout | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {max_retries!r}")
        if not model:
            raise ValueError("model must be a non-empty model name")
        self.http = http
        self.model = model
        self.base_url = base_url
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key or None
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self.timeout = timeout

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatClient(model={self.model!r}, url={self.url!r})"

    def request_body(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool] = (),
        options: ChatOptions | None = None,
    ) -> dict[str, Any]:
        """The JSON body of one streamed `/chat/completions` request."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [message.to_wire() for message in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
        chosen = options or ChatOptions()
        for option in dataclasses.fields(chosen):
            value = getattr(chosen, option.name)
            if value is None:
                continue
            if option.name == "parallel_tool_calls" and not tools:
                continue  # OpenAI answers 400 to parallel_tool_calls without tools
            if option.name == "max_tokens" and _wants_max_completion_tokens(self.model):
                body["max_completion_tokens"] = value
                continue
            body[option.name] = value
        return body

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool] = (),
        options: ChatOptions | None = None,
    ) -> AsyncIterator[ChatUpdate]:
        """Stream one model turn; see `ChatClient` for what is yielded and raised."""
        body = self.request_body(messages, tools=tools, options=options)
        headers = self._headers()
        extra = self._timeout()
        attempt = 0
        while True:
            try:
                async with aconnect_sse(
                    self.http, "POST", self.url, json=body, headers=headers, **extra
                ) as source:
                    await self._check_response(source.response)
                    async for update in self._read(source):
                        yield update
                return
            except _Retry as retry:
                if attempt >= self.max_retries:
                    raise retry.error from None
                delay = retry.delay if retry.delay is not None else self._backoff(attempt)
                attempt += 1
                logger.info(
                    "%s; retry %d of %d in %.2fs", retry.error, attempt, self.max_retries, delay
                )
                await self._sleep(delay)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as exc:
                # No answer has started yet (errors inside the stream are handled by `_read`),
                # so another try is safe: at worst the model works twice for one answer.
                error = ChatClientError(f"could not connect to {self.url}: {_describe(exc)}")
                if attempt >= self.max_retries:
                    raise error from exc
                delay = self._backoff(attempt)
                attempt += 1
                logger.info("%s; retry %d of %d in %.2fs", error, attempt, self.max_retries, delay)
                await self._sleep(delay)
            except httpx.TimeoutException as exc:
                raise ChatClientError(
                    f"timed out waiting for {self.url} to answer: {_describe(exc)}"
                ) from exc
            except httpx.HTTPError as exc:
                raise ChatClientError(f"request to {self.url} failed: {_describe(exc)}") from exc

    async def check(self) -> str:
        """Is the endpoint there, and does it take the key? One `GET {base_url}/models`.

        Returns a short description for people (e.g. "https://api.openai.com/v1 is reachable and
        lists model 'gpt-4o-mini'"). Raises `ProviderError` if the endpoint refuses the key
        (401/403) or fails (429/5xx), `ChatClientError` if it cannot be reached. Nothing is
        retried: this is a probe, and its caller wants the answer now. Any other answer (a 404
        from a server without a model list, say) counts as reachable.
        """
        base = self.base_url.rstrip("/")
        url = base + "/models"
        try:
            response = await self.http.get(url, headers=self._headers(), **self._timeout())
        except httpx.TimeoutException as exc:
            raise ChatClientError(f"timed out waiting for {url}: {_describe(exc)}") from exc
        except httpx.HTTPError as exc:
            raise ChatClientError(f"cannot reach {url}: {_describe(exc)}") from exc
        status = response.status_code
        try:
            payload: Any = response.json()
        except ValueError:
            payload = None
        if status in (401, 403) or status in _RETRYABLE_STATUS or status >= 500:
            provider_message, _ = error_details(payload)
            shown = shorten(provider_message or response.text) or "(empty body)"
            what = "refused the API key" if status in (401, 403) else "failed"
            raise ProviderError(
                f"{url} {what} (HTTP {status}): {shown}",
                status_code=status,
                provider_message=provider_message,
            )
        if status >= 300:
            return f"{base} is reachable (HTTP {status} to GET /models, so no model list)"
        models = _model_ids(payload)
        if models is None:
            return f"{base} is reachable (its /models answer is not a model list)"
        if self.model in models:
            return f"{base} is reachable and lists model {self.model!r}"
        return (
            f"{base} is reachable, but model {self.model!r} is not among the {len(models)} "
            "it lists (some providers do not list every model they serve)"
        )

    async def context_window(self, timeout: float = 5.0) -> tuple[int, str] | None:
        """The window the server says this model has, and where it said so; `None` if it
        does not say (or cannot be reached in `timeout` seconds: start-up must not wait).

        vLLM lists `max_model_len` and OpenRouter `context_length` in `GET /models`;
        llama.cpp's `/models` has only the training window (`n_ctx_train`, which the server
        may run below), so its running `n_ctx` is read from `GET /props` at the server root.
        """
        base = self.base_url.rstrip("/")
        entry = _model_entry(await self._get_json(base + "/models", timeout), self.model)
        for key in ("max_model_len", "context_length", "context_window"):
            found = _positive(entry.get(key)) if entry else None
            if found is not None:
                return found, f"GET {base}/models ({key})"
        root = base.removesuffix("/v1")
        props = await self._get_json(root + "/props", timeout)
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        for where in (settings, props):
            found = _positive(where.get("n_ctx")) if isinstance(where, dict) else None
            if found is not None:
                return found, f"GET {root}/props (n_ctx)"
        return None

    async def template_supports_tools(self, timeout: float = 5.0) -> bool | None:
        """What llama.cpp's `GET /props` says of its chat template (`chat_template_caps`):
        False means `tools` are ignored and the model only chats. None: the server does not
        say (not llama.cpp, or unreachable). Costs no model call, so start-up can ask."""
        root = self.base_url.rstrip("/").removesuffix("/v1")
        props = await self._get_json(root + "/props", timeout)
        caps = props.get("chat_template_caps") if isinstance(props, dict) else None
        supports = caps.get("supports_tools") if isinstance(caps, dict) else None
        return supports if isinstance(supports, bool) else None

    async def answers_with_tool_calls(self) -> bool:
        """Does the model call a tool when asked to? One short request carrying a probe tool
        (`opsgate check --tools`). A server whose chat template has no tools section ignores
        `tools` silently and answers in words: then False. Errors are raised as by `stream`."""
        probe = FunctionTool(
            _report_ready, name="report_ready", description="Report that you are ready."
        )
        messages = [
            ChatMessage.system("You call tools when asked. Answer only with a tool call."),
            ChatMessage.user("Call the report_ready tool now."),
        ]
        options = ChatOptions(temperature=0.0, max_tokens=64)
        stream = self.stream(messages, tools=[probe], options=options)
        async with contextlib.aclosing(stream) as updates:  # type: ignore[type-var]
            async for update in updates:
                if isinstance(update, ToolCallEnded | ToolCallStarted):
                    return True
        return False

    async def _get_json(self, url: str, timeout: float) -> Any:
        try:
            response = await self.http.get(url, headers=self._headers(), timeout=timeout)
            return response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            logger.debug("GET %s gave no context window: %s", url, _describe(exc))
            return None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _timeout(self) -> dict[str, Any]:
        return {} if self.timeout is None else {"timeout": self.timeout}

    async def _check_response(self, response: httpx.Response) -> None:
        """Turn an unusable answer into the right error before any stream byte is read."""
        status = response.status_code
        if status < 300 and _is_event_stream(response):
            return
        await response.aread()
        text = response.text
        try:
            payload: Any = replace_lone_surrogates_in(json.loads(text))
        except ValueError:
            payload = None
        provider_message, _ = error_details(payload)
        shown = shorten(provider_message or text) or "(empty body)"
        if status < 300:
            content_type = response.headers.get("content-type", "(none)")
            if provider_message is not None:
                raise ProviderError(
                    f"{self.url} answered HTTP {status} with an error: {shown}",
                    status_code=status,
                    provider_message=provider_message,
                )
            raise StreamError(
                f"{self.url} answered HTTP {status} with {content_type!r}, not an event stream: "
                f"{shown}"
            )
        kind, window = error_kind(payload)
        error = ProviderError(
            f"{self.url} answered HTTP {status}: {shown}",
            status_code=status,
            provider_message=provider_message,
            code=error_code(payload),
            kind=kind,
            context_window=window,
        )
        if status in _RETRYABLE_STATUS or status >= 500:
            raise _Retry(error, _retry_after(response.headers))
        raise error

    async def _read(self, source: EventSource) -> AsyncIterator[ChatUpdate]:
        """The stream itself: from here on nothing is retried."""
        assembler = ChunkAssembler(self.url)
        try:
            after_done = 0
            async for event in source.aiter_sse():
                if assembler.done:
                    # Read on to the end of the body (ignoring it) so httpx can put the
                    # connection back in its pool; a provider that never stops gets cut off.
                    after_done += 1
                    if after_done > _DRAIN_LIMIT:
                        break
                    continue
                for update in assembler.feed(event.event, event.data):
                    yield update
        except httpx.TimeoutException as exc:
            raise StreamError(
                f"timed out reading the stream from {self.url}: {_describe(exc)}",
                partial_text=assembler.partial_text,
            ) from exc
        except httpx.HTTPError as exc:
            raise StreamError(
                f"the stream from {self.url} broke off: {_describe(exc)}",
                partial_text=assembler.partial_text,
            ) from exc
        for update in assembler.finish():
            yield update

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter, capped at `backoff_max`."""
        ceiling = min(self.backoff_max, self.backoff_base * 2.0**attempt)
        return random.uniform(ceiling / 2, ceiling)


_DRAIN_LIMIT = 100
"""Events read and ignored after `[DONE]` before giving up on reusing the connection."""


def _is_event_stream(response: httpx.Response) -> bool:
    header: str = response.headers.get("content-type", "")
    return header.partition(";")[0].strip().lower() == "text/event-stream"


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait the server asked for: `retry-after-ms`, then `retry-after` (seconds or date)."""
    delay: float | None = None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            delay = float(raw_ms) / 1000
        except ValueError:
            delay = None
    raw = headers.get("retry-after")
    if delay is None and raw is not None:
        try:
            delay = float(raw)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                when = None
            if when is not None and when.tzinfo is not None:
                delay = max(0.0, when.timestamp() - time.time())
    if delay is None or not 0 <= delay <= _MAX_SERVER_DELAY:
        return None
    return delay


def _model_ids(payload: Any) -> set[str] | None:
    """The ids of an OpenAI-style model list (`{"data": [{"id": ...}, ...]}`), or None."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return None
    return {str(m["id"]) for m in data if isinstance(m, dict) and "id" in m}


def _report_ready() -> str:
    """The probe tool of `answers_with_tool_calls`: never run, only offered."""
    return "ready"


def _model_entry(payload: Any, model: str) -> dict[str, Any] | None:
    """This model's entry in an OpenAI-style model list (the only one, if it lists one)."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return None
    entries = [m for m in data if isinstance(m, dict)]
    for entry in entries:
        if entry.get("id") == model:
            return entry
    return entries[0] if len(entries) == 1 else None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


_MAX_COMPLETION_TOKENS_MODELS = ("o1", "o3", "o4", "gpt-5")
"""OpenAI's reasoning models refuse `max_tokens` and want `max_completion_tokens`."""


def _wants_max_completion_tokens(model: str) -> bool:
    return model.rsplit("/", 1)[-1].lower().startswith(_MAX_COMPLETION_TOKENS_MODELS)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
