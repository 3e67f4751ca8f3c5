"""`ChatClientAgent`: history in, tool loop, history out."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Sequence
from typing import Protocol

from ._compact import Compactor
from ._loop import ApprovalGate, FunctionInvokingChatClient
from .approvals import AgentRunOptions, pending_tool_calls
from .chat_client import ChatClient
from .context import ContextBudget, ContextWindowMemory
from .exceptions import PendingApprovalError, ResumeError
from .messages import AgentResponseUpdate, ChatMessage, ToolApprovalRequest, ToolCall, ToolCallHeld
from .sessions import AgentSession, InMemorySessionStore, SessionStore, StoredContext
from .tools import Tool

__all__ = ["ChatClientAgent", "ContextProvider"]

_ASKS = ("user", "tool")
"""Roles of a last message after which the model is asked next."""


class ContextProvider(Protocol):
    """Adds context before a run (memory, channel instructions) and observes its result."""

    async def on_invoking(
        self, session: AgentSession, messages: Sequence[ChatMessage]
    ) -> Sequence[ChatMessage]:
        """Messages to put before the history for this run only; they are not stored."""
        ...

    async def on_invoked(
        self,
        session: AgentSession,
        request: Sequence[ChatMessage],
        response: Sequence[ChatMessage],
    ) -> None: ...


class _SessionJournal:
    """Binds the loop's journal to one session of a store, and keeps what the run produced."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.produced: list[ChatMessage] = []

    async def append(self, messages: Sequence[ChatMessage]) -> None:
        await self.store.append_messages(self.session_id, messages)
        self.produced.extend(messages)

    async def pause(
        self,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None:
        await self.store.record_pause(self.session_id, message, requests, held)
        self.produced.append(message)

    async def start_tool_call(self, call: ToolCall) -> None:
        await self.store.start_tool_call(self.session_id, call)

    async def finish_tool_call(
        self, call: ToolCall, message: ChatMessage, *, is_error: bool
    ) -> None:
        await self.store.finish_tool_call(self.session_id, call, message, is_error=is_error)
        self.produced.append(message)


def _as_messages(messages: str | ChatMessage | Sequence[ChatMessage] | None) -> list[ChatMessage]:
    if messages is None:
        return []
    if isinstance(messages, str):
        return [ChatMessage.user(messages)]
    if isinstance(messages, ChatMessage):
        return [messages]
    return list(messages)


class ChatClientAgent:
    """An agent: instructions, tools and a store around a `ChatClient`.

    `run(messages, session)` starts a turn; `run(None, session,
    options.with_tool_approval_responses([...]))` resumes a paused one.
    """

    def __init__(
        self,
        client: ChatClient,
        *,
        instructions: str | None = None,
        tools: Sequence[Tool] = (),
        store: SessionStore | None = None,
        context_providers: Sequence[ContextProvider] = (),
        max_rounds: int = 10,
        approval_gate: ApprovalGate | None = None,
        context: ContextBudget | None = None,
        windows: ContextWindowMemory | None = None,
    ) -> None:
        """`context` is the budget each request is fitted into (see `agent_core.context`); by
        default the one of the client's `model`, if it names one. `windows` remembers the
        real window of a model whose server refused a request as too long, so every later
        run (here, after a restart, on another replica) starts from it."""
        names = [t.name for t in tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"tool names must be unique; repeated: {duplicates!r}")
        self.instructions = instructions
        self.tools = tuple(tools)
        self.store: SessionStore = store if store is not None else InMemorySessionStore()
        self.context_providers = tuple(context_providers)
        model = getattr(client, "model", None)
        if context is None and isinstance(model, str):
            context = ContextBudget.for_model(model)
        self.context = context
        self.model = model if isinstance(model, str) else None
        self.windows = windows
        self.loop = FunctionInvokingChatClient(
            client, max_rounds=max_rounds, approval_gate=approval_gate
        )

    async def run(
        self,
        messages: str | ChatMessage | Sequence[ChatMessage] | None,
        session: AgentSession,
        options: AgentRunOptions | None = None,
    ) -> AsyncGenerator[AgentResponseUpdate, None]:
        options = options or AgentRunOptions()
        new = _as_messages(messages)
        if options.tool_approval_responses and new:
            raise ResumeError(
                f"resume of session {session.id!r} carries decisions only, not new messages"
            )
        if not options.tool_approval_responses and not new:
            raise ValueError(
                f"run() of session {session.id!r} needs messages, "
                "or tool_approval_responses to resume"
            )
        loaded = await self.store.load_context(session.id)
        if new and pending_tool_calls(loaded.messages):
            raise PendingApprovalError(
                f"session {session.id!r} has tool calls waiting for decisions; "
                "resume it before sending new messages"
            )
        if new:
            await self.store.append_messages(session.id, new)
        async with contextlib.aclosing(self._run(loaded, new, session, options)) as stream:
            async for update in stream:
                yield update

    async def run_again(
        self, session: AgentSession, options: AgentRunOptions | None = None
    ) -> AsyncGenerator[AgentResponseUpdate, None]:
        """Answer the stored history as it stands: a run cut short (the process died while
        the model was asked) after its message was stored and before it was answered. The
        history must end where a model request comes next (a person's message, or a tool's
        answer) with no call waiting; nothing is added to it before the request."""
        options = options or AgentRunOptions()
        if options.tool_approval_responses:
            raise ResumeError(f"run_again() of session {session.id!r} carries no decisions")
        loaded = await self.store.load_context(session.id)
        last = loaded.messages[-1] if loaded.messages else None
        if pending_tool_calls(loaded.messages) or last is None or last.role not in _ASKS:
            raise ResumeError(
                f"session {session.id!r} has no question left to answer: its history ends "
                f"with {'nothing' if last is None else repr(last.role)}"
            )
        async with contextlib.aclosing(self._run(loaded, [], session, options)) as stream:
            async for update in stream:
                yield update

    async def _run(
        self,
        loaded: StoredContext,
        new: list[ChatMessage],
        session: AgentSession,
        options: AgentRunOptions,
    ) -> AsyncGenerator[AgentResponseUpdate, None]:
        """The run itself, once `new` (if any) is stored after the `loaded` history."""
        history = loaded.messages
        journal = _SessionJournal(self.store, session.id)
        context: list[ChatMessage] = []
        for provider in self.context_providers:
            context.extend(await provider.on_invoking(session, [*history, *new]))
        system = [ChatMessage.system(self.instructions)] if self.instructions else []
        view = None
        if self.context is not None:
            fixed = len(system) + len(context)
            view = Compactor(
                await self._budget(self.context),
                self.loop.client,
                self.store,
                session.id,
                fixed=fixed,
                loaded=loaded,
                model=self.model,
                windows=self.windows,
            )
        stream = self.loop.run(
            [*system, *context, *history, *new],
            tools=self.tools if options.tools is None else options.tools,
            journal=journal,
            options=options,
            view=view,
        )
        async with contextlib.aclosing(stream):  # an abandoned run releases the model stream
            async for update in stream:
                yield update
        for provider in self.context_providers:
            await provider.on_invoked(session, new, journal.produced)

    async def _budget(self, budget: ContextBudget) -> ContextBudget:
        """The budget, within the window a refusal revealed for this model, if smaller."""
        if self.windows is None or self.model is None:
            return budget
        learned = await self.windows.context_window(self.model)
        if learned is None or learned >= budget.context_tokens:
            return budget
        return budget.with_window(learned)
