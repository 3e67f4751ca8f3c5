"""Turning an OpenAI-compatible `chat.completion.chunk` stream into `ChatUpdate`s.

SSE framing itself is httpx-sse's job; this module only sees decoded events. Providers differ in
small ways that break naive parsers, so every rule here comes from a real capture (see
tests/fixtures/openai-sse/): chunks with empty `choices`, usage on any chunk or on none, a whole
tool call in one delta without `index`/`type`, parallel calls that all claim `index: 0`, `id` and
`name` repeated in later fragments, reasoning under two different keys, two finish chunks, and
errors sent as a top-level `error` chunk or as an `event: error` frame.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .exceptions import ProviderError, StreamError
from .messages import (
    ChatUpdate,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallStarted,
    Usage,
    replace_lone_surrogates_in,
)

__all__ = ["ChunkAssembler", "error_code", "error_details", "error_kind"]

logger = logging.getLogger("agent_core.openai")

_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
}

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A JSON escape that decodes to a surrogate; only then is a chunk walked to clean its strings."""

_SNIPPET = 200
"""How much of an unusable payload an error message quotes (it is untrusted and may be huge)."""


def _snippet(text: str) -> str:
    return repr(text if len(text) <= _SNIPPET else text[:_SNIPPET] + "…")


ERROR_TEXT_LIMIT = 4_000
"""Most characters of a provider's own error text kept in an error's message: the message is
logged (a thread shows less of it), and a provider may echo a whole request or an HTML page."""


def shorten(text: str) -> str:
    """`text` stripped and cut to `ERROR_TEXT_LIMIT` characters, saying how much was cut."""
    text = text.strip()
    if len(text) <= ERROR_TEXT_LIMIT:
        return text
    return f"{text[:ERROR_TEXT_LIMIT]}… ({len(text) - ERROR_TEXT_LIMIT:,} more characters cut)"


def error_code(payload: Any) -> str | None:
    """The provider's error code word (OpenAI: `{"error": {"code": "context_length_exceeded"}}`)."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error", payload)
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) and code else None


def error_kind(payload: Any) -> tuple[str | None, int | None]:
    """The provider's error type word and the window it states, if any (llama.cpp:
    `{"error": {"type": "exceed_context_size_error", "n_ctx": 4096}}`)."""
    if not isinstance(payload, dict):
        return None, None
    error = payload.get("error", payload)
    if not isinstance(error, dict):
        return None, None
    kind, window = error.get("type"), error.get("n_ctx")
    return (
        kind if isinstance(kind, str) and kind else None,
        window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None,
    )


def error_details(payload: Any) -> tuple[str | None, int | None]:
    """The provider's own message and numeric code from an error body, if it has them.

    Understands OpenAI's `{"error": {"message": ...}}` and the common variants
    (`{"error": "text"}`, `{"message": ...}`, `{"detail": ...}`).
    """
    if not isinstance(payload, dict):
        return None, None
    error = payload.get("error", payload)
    if isinstance(error, str):
        return error or None, None
    if not isinstance(error, dict):
        return None, None
    message: str | None = None
    for key in ("message", "detail", "error"):
        value = error.get(key)
        if isinstance(value, str) and value:
            message = value
            break
    code: int | None = None
    for key in ("status_code", "status", "code"):
        value = error.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            code = value
            break
    return message, code


@dataclass(slots=True)
class _CallBuilder:
    """One tool call being put together from its fragments."""

    position: int
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    started: bool = False


class ChunkAssembler:
    """Feeds on one response's SSE events; yields updates as they become known.

    `feed` handles one event and reports whether the stream said `[DONE]`; `finish` yields the
    closing `ToolCallEnded`s and the single `Finish`, or raises if the stream was cut short.
    Errors carry the text streamed so far (`partial_text`) so nothing the user saw is lost.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        """Names the endpoint in error messages (a URL, never a key)."""
        self.text: list[str] = []
        self._calls: list[_CallBuilder] = []
        self._by_index: dict[int | None, _CallBuilder] = {}
        self._finish: str | None = None
        self._usage: Usage | None = None
        self.done = False

    @property
    def partial_text(self) -> str:
        return "".join(self.text)

    def feed(self, event: str, data: str) -> Iterator[ChatUpdate]:
        """Handle one SSE event (`event` is its type, `data` its joined data lines)."""
        if self.done:
            logger.debug("ignoring an event after [DONE] from %s", self.source)
            return
        if event == "error":
            self._raise_provider_error(self._parse(data) if data.strip() else None, data)
        if event not in ("message", ""):
            logger.debug("ignoring SSE event %r from %s", event, self.source)
            return
        stripped = data.strip()
        if not stripped:
            return
        if stripped == "[DONE]":
            self.done = True
            return
        chunk = self._parse(data)
        if not isinstance(chunk, dict):
            raise StreamError(
                f"stream from {self.source} sent a chunk that is not a JSON object: "
                f"{_snippet(data)}",
                partial_text=self.partial_text,
            )
        if chunk.get("error"):
            self._raise_provider_error(chunk, data)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        out: list[ChatUpdate] = []
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) not in (0, None):
                continue  # n > 1 is never requested; other choices are not ours to merge
            self._choice(choice, out)
        yield from out

    def finish(self) -> Iterator[ChatUpdate]:
        """Close the turn: every call's `ToolCallEnded`, then exactly one `Finish`."""
        if self._finish is None:
            raise StreamError(
                f"stream from {self.source} ended without a finish reason (truncated)",
                partial_text=self.partial_text,
            )
        if not self.done:
            logger.debug("stream from %s finished (%s) without [DONE]", self.source, self._finish)
        if self._finish == "error":
            raise ProviderError(
                f"{self.source} ended the stream with finish_reason 'error'",
                partial_text=self.partial_text,
            )
        reason = _FINISH_REASONS.get(self._finish)
        if reason is None:
            logger.debug(
                "unknown finish_reason %r from %s; taken as stop", self._finish, self.source
            )
            reason = FinishReason.STOP
        calls: list[ToolCall] = []
        for builder in self._calls:
            if builder.id is None:
                # Some local servers send no ids; the history needs one to answer the call.
                builder.id = f"call_{builder.position}_{secrets.token_hex(6)}"
            if not builder.name:
                raise StreamError(
                    f"stream from {self.source} sent tool call {builder.id!r} without a name",
                    partial_text=self.partial_text,
                )
            yield from self._start(builder)
            calls.append(
                ToolCall(id=builder.id, name=builder.name, arguments="".join(builder.arguments))
            )
        for call in calls:
            yield ToolCallEnded(call)
        if calls and reason is FinishReason.STOP:
            reason = FinishReason.TOOL_CALLS
        yield Finish(reason, self._usage)

    def _parse(self, data: str) -> Any:
        try:
            value = json.loads(data)
        except json.JSONDecodeError as exc:
            raise StreamError(
                f"stream from {self.source} sent malformed JSON ({exc}): {_snippet(data)}",
                partial_text=self.partial_text,
            ) from None
        # A lone `\ud800` would fail the first UTF-8 encode downstream (see agent_core.messages).
        return replace_lone_surrogates_in(value) if _SURROGATE_ESCAPE.search(data) else value

    def _raise_provider_error(self, payload: Any, raw: str) -> None:
        message, code = error_details(payload)
        shown = shorten(message) if message else _snippet(raw)
        raise ProviderError(
            f"{self.source} reported an error mid-stream: {shown}",
            status_code=code,
            provider_message=message,
            partial_text=self.partial_text,
        )

    def _choice(self, choice: dict[str, Any], out: list[ChatUpdate]) -> None:
        """Append what one choice of a chunk says to `out`.

        Lists, not nested generators: this runs for every chunk of every answer (a tool call's
        arguments arrive about 4 characters a chunk), so it stays lean.
        """
        delta = choice.get("delta")
        if isinstance(delta, dict) and delta:
            if "reasoning_content" in delta or "reasoning" in delta:
                reasoning = delta.get("reasoning_content")
                if not isinstance(reasoning, str) or not reasoning:
                    reasoning = delta.get("reasoning")
                if isinstance(reasoning, str) and reasoning:
                    out.append(ReasoningDelta(reasoning))
            for key in ("content", "refusal"):
                text = delta.get(key)
                if text and isinstance(text, str):
                    self.text.append(text)
                    out.append(TextDelta(text))
            fragments = delta.get("tool_calls")
            if isinstance(fragments, list):
                for fragment in fragments:
                    if isinstance(fragment, dict):
                        self._fragment(fragment, out)
        reason = choice.get("finish_reason")
        if reason and isinstance(reason, str):
            if self._finish is None:
                self._finish = reason
            else:
                logger.debug("ignoring a second finish_reason %r from %s", reason, self.source)

    def _fragment(self, fragment: dict[str, Any], out: list[ChatUpdate]) -> None:
        raw_index = fragment.get("index")
        index = raw_index if isinstance(raw_index, int) else None
        raw_id = fragment.get("id")
        call_id = raw_id if isinstance(raw_id, str) else None
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}
        raw_name = function.get("name")
        name = raw_name if isinstance(raw_name, str) else None
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a few servers send the object, not its JSON text
            arguments = json.dumps(arguments, ensure_ascii=False)

        builder = self._builder(index, call_id)
        if call_id and builder.id is None:
            builder.id = call_id
        if name and not builder.name:
            builder.name = name
        elif name and name != builder.name:
            logger.debug("tool call %r renamed to %r mid-stream; kept the first", builder.id, name)
        if arguments and isinstance(arguments, str):
            builder.arguments.append(arguments)
            if builder.started:
                assert builder.id is not None
                out.append(ToolCallArgumentsDelta(builder.id, arguments))
        if not builder.started and builder.id and builder.name:
            out.extend(self._start(builder))

    def _builder(self, index: int | None, call_id: str | None) -> _CallBuilder:
        """The call a fragment belongs to, new or known."""
        builder = self._by_index.get(index)
        if index is None and builder is None and call_id is None and self._calls:
            builder = self._calls[-1]  # no index, no id: continues the latest call
        if call_id and builder is not None and builder.id not in (None, call_id):
            builder = None  # a new id on a known index starts a new call (all-on-index-0 style)
        if builder is None:
            builder = _CallBuilder(position=len(self._calls))
            self._calls.append(builder)
            self._by_index[index] = builder
        return builder

    def _start(self, builder: _CallBuilder) -> Iterator[ChatUpdate]:
        """Announce a call once its id and name are known, with any arguments held back."""
        if builder.started:
            return
        assert builder.id is not None and builder.name is not None
        builder.started = True
        yield ToolCallStarted(builder.id, builder.name)
        if builder.arguments:
            yield ToolCallArgumentsDelta(builder.id, "".join(builder.arguments))


def _usage(raw: dict[str, Any]) -> Usage:
    def number(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    prompt, completion = number("prompt_tokens"), number("completion_tokens")
    return Usage(prompt, completion, number("total_tokens") or prompt + completion)
