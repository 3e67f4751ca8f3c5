"""A summary request is the agent's own business: what the model writes for it is stored as the
summary and sent in later requests, never streamed to the run's consumer as answer text.

Both ways a summary is asked for: before a request the budget says is too long, and after the
provider refused one (its window learned from the refusal), with the run's history held in an
in-memory store and the model a `FunctionChatClient`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agent_core import (
    AgentSession,
    ChatClientAgent,
    ChatMessage,
    ContextBudget,
    Finish,
    FinishReason,
    InMemoryContextWindows,
    InMemorySessionStore,
    ProviderError,
    TextDelta,
)
from agent_core._compact import SUMMARY_PROMPT
from agent_core.testing import FunctionChatClient, Request, collect

SUMMARY = "SUMMARY: an earlier conversation of 3 messages, all calm."
FILLER = "is the queue on worker-7 draining, and how fast? " * 120


def _is_summary(messages: Sequence[ChatMessage]) -> bool:
    return bool(messages) and messages[0].content == SUMMARY_PROMPT


class _Model:
    """Summarises when asked to; otherwise answers the last question, after refusing the first
    `refusals` requests as llama.cpp does (its window: 4096 tokens)."""

    def __init__(self, refusals: int = 0) -> None:
        self.refusals = refusals
        self.summaries = 0

    def __call__(self, messages: Sequence[ChatMessage], request: Request) -> str:
        if _is_summary(messages):
            self.summaries += 1
            return SUMMARY
        if self.refusals:
            self.refusals -= 1
            raise ProviderError(
                "refused",
                status_code=400,
                kind="exceed_context_size_error",
                context_window=4096,
            )
        return f"Answer to {str(messages[-1].content).split()[0]}."


class _NamedClient(FunctionChatClient):
    model = "stand-in"
    """The name a learned window is remembered under."""


async def _turns(agent: ChatClientAgent, count: int) -> list[list[str]]:
    """The answer text each of `count` turns streamed, as its deltas."""
    streamed: list[list[str]] = []
    for k in range(count):
        updates = await collect(agent.run(f"m{k:02d} {FILLER}", AgentSession("s")))
        assert isinstance(updates[-1], Finish) and updates[-1].finish_reason is FinishReason.STOP
        streamed.append([u.text for u in updates if isinstance(u, TextDelta)])
    return streamed


@pytest.mark.parametrize("refusals", [0, 1], ids=["budget", "refusal"])
async def test_a_summary_is_never_streamed_as_answer_text(refusals: int) -> None:
    model = _Model(refusals)
    store = InMemorySessionStore()
    budget = ContextBudget(context_tokens=4096 if refusals == 0 else 128_000)
    agent = ChatClientAgent(
        _NamedClient(model),
        instructions="You are OpsGate.",
        store=store,
        context=budget,
        windows=InMemoryContextWindows(),
    )
    streamed = await _turns(agent, 8)
    assert streamed == [[f"Answer to m{k:02d}."] for k in range(8)]  # its own, once
    assert model.summaries >= 3  # compacted again and again
    assert store.summaries["s"][-1].text == SUMMARY  # kept for the model, not shown
    stored = [m.content for m in store.messages["s"] if m.role == "assistant"]
    assert not [text for text in stored if text and SUMMARY in text]
