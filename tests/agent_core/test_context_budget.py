"""The context budget's shortcut: a request far below the budget is sent without tokenizing.

Counting every message of every request is wasted work when the history is a small fraction of
the window, so `ContextBudget.fits_uncounted` bounds the count from character lengths and the
counter's per-character promise. These tests check the promise holds for the real counters
(the estimate, and OpenAI's encodings from the `bpe-openai` wheel) on real and awkward text,
that the bound never says "fits" for a request that does not, and that the compactor then
skips the counter entirely while sending exactly what it sent before.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from agent_core import ChatMessage, ContextBudget, InMemorySessionStore, ToolCall, tool
from agent_core._compact import Compactor
from agent_core.context import BpeCounter, EstimateCounter, TokenCounter
from agent_core.sessions import StoredContext
from agent_core.testing import ScriptedChatClient, Turn

FIXTURES = Path(__file__).parent.parent / "fixtures"

AWKWARD = [
    "",
    "a",
    "    \n\n\t  ",
    "deploy build 4812 to web-1..web-9; restart nginx",
    "日本語のテキストとコード",
    "🚀🔥" * 50,
    "e\u0301" * 40,  # combining marks
    "\x00\x01\x02 control",
    "x" * 250_000,  # longer than one BPE chunk
    "🚀" * 120_000,  # many 4-byte characters across chunk cuts
]


def _texts() -> list[str]:
    texts = list(AWKWARD)
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.suffix in (".json", ".txt", ".sse"):
            texts.append(path.read_text(errors="replace"))
    return texts


def _counters() -> list[TokenCounter]:
    return [EstimateCounter(), BpeCounter("o200k_base"), BpeCounter("cl100k_base")]


@pytest.mark.parametrize("counter", _counters(), ids=lambda c: c.name)
def test_every_counter_keeps_its_per_character_promise(counter: TokenCounter) -> None:
    per_char = counter.max_tokens_per_char  # type: ignore[attr-defined]
    texts = _texts()
    assert len(texts) > len(AWKWARD)  # the fixtures were read
    for text in texts:
        assert counter.count(text) <= per_char * len(text), text[:80]


def _history(rng: random.Random, size: int) -> list[ChatMessage]:
    words = ["web", "tier", "🚀", "日本", "restart", "{", "}", "\n", "ok", "error:", "404"]
    out: list[ChatMessage] = [ChatMessage.system("You are an operations assistant.")]
    for i in range(size):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 400)))
        if i % 3 == 2:
            call = ToolCall(id=f"c{i}", name="run", arguments=json.dumps({"cmd": text[:60]}))
            out.append(ChatMessage.assistant(None, (call,)))
            out.append(ChatMessage.tool(text, f"c{i}"))
        else:
            out.append(ChatMessage.user(text, name="U0ALICE"))
    return out


@pytest.mark.parametrize("model", ["gpt-4o", "some-local-model"])
def test_fits_uncounted_never_says_fits_for_a_request_that_does_not(model: str) -> None:
    budget = ContextBudget.for_model(model)
    rng = random.Random(13)
    said_fits = said_count = 0
    for _ in range(60):
        messages = _history(rng, rng.randint(1, 30))
        exact = budget.messages_tokens(messages)
        for target in (exact // 2, exact - 1, exact, exact * 3, exact * 30, budget.prompt_tokens):
            if budget.fits_uncounted(messages, target):
                said_fits += 1
                assert exact <= target
            else:
                said_count += 1
    assert said_fits and said_count  # both answers were given, so both were checked


class _CountingCounter(EstimateCounter):
    """The estimate, recording what it was asked to count."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def count(self, text: str) -> int:
        self.texts.append(text)
        return super().count(text)


@tool
def run(cmd: str) -> str:
    """Run a command."""
    return cmd


async def test_a_request_far_below_the_budget_is_sent_without_counting_its_messages() -> None:
    counter = _CountingCounter()
    budget = ContextBudget(context_tokens=128_000, counter=counter)
    history = _history(random.Random(1), 12)
    compactor = Compactor(
        budget,
        ScriptedChatClient(),
        InMemorySessionStore(),
        "s1",
        fixed=1,
        loaded=StoredContext(None, history[1:]),
    )
    first = await compactor.prepare(history, [run])
    second = await compactor.prepare([*history, ChatMessage.user("and now?")], [run])
    assert first == history
    assert second == [*history, ChatMessage.user("and now?")]
    assert len(counter.texts) == 1  # the tool definitions, once for the run; no message
    assert '"name":"run"' in counter.texts[0]


async def test_a_request_near_the_budget_is_still_counted_and_compacted() -> None:
    counter = _CountingCounter()
    budget = ContextBudget(context_tokens=2_000, counter=counter)
    history = [ChatMessage.system("sys")] + [
        ChatMessage.user(f"message {i}: " + "the web tier is healthy. " * 20) for i in range(12)
    ]
    model = ScriptedChatClient(Turn("Earlier: people asked about the web tier; all fine."))
    compactor = Compactor(
        budget,
        model,
        InMemorySessionStore(),
        "s1",
        fixed=1,
        loaded=StoredContext(None, history[1:]),
    )
    sent = await compactor.prepare(history, [])
    assert any("message 0" in text for text in counter.texts)  # the messages were counted
    assert budget.messages_tokens(sent) <= budget.prompt_tokens
    assert len(sent) < len(history)  # older turns were replaced
