"""The tool loop: `FunctionInvokingChatClient`, the approval gate and the resume path.

This is the seed design (pause, collect, resume) with DESIGN.md's gaps closed: only gated calls
are asked about, siblings are held and run on resume so every `tool_call_id` is answered, a
resume must decide every gated call and name only pending ones, and the internal `TOOL_CALLS`
finish never reaches the consumer.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, Protocol, TypeVar

from .approvals import AgentRunOptions, ToolApprovalResponse
from .chat_client import ChatClient
from .events import (
    AgentResponseUpdate,
    ChatUpdate,
    Finish,
    FinishReason,
    TextDelta,
    ToolApprovalRequest,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallHeld,
    ToolCallStarted,
    ToolResult,
    Usage,
)
from .exceptions import ChatClientError, ResumeError, ToolCallAlreadyStarted, ToolError
from .messages import ChatMessage, ToolCall, call_digest
from .tools import Tool, _to_text

__all__ = ["ApprovalGate", "FunctionInvokingChatClient", "RunJournal", "pending_tool_calls"]

logger = logging.getLogger("agent_core")

_T = TypeVar("_T")

ApprovalGate = Callable[[Tool, ToolCall], bool]
"""Decides whether one call of a known tool must wait for a human."""


def default_gate(tool: Tool, call: ToolCall) -> bool:
    return tool.requires_approval()


class RunJournal(Protocol):
    """Where the loop writes what must survive a crash, before it goes on (see `SessionStore`)."""

    async def append(self, messages: Sequence[ChatMessage]) -> None: ...

    async def pause(
        self,
        message: ChatMessage,
        requests: Sequence[ToolApprovalRequest],
        held: Sequence[ToolCallHeld],
    ) -> None: ...

    async def start_tool_call(self, call: ToolCall) -> None: ...

    async def finish_tool_call(
        self, call: ToolCall, message: ChatMessage, *, is_error: bool
    ) -> None: ...


def pending_tool_calls(messages: Sequence[ChatMessage]) -> list[ToolCall]:
    """Calls of the last assistant tool-call message that have no `tool` answer yet."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant" and message.tool_calls:
            answered = {m.tool_call_id for m in messages[index + 1 :] if m.role == "tool"}
            return [call for call in message.tool_calls if call.id not in answered]
    return []


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@contextlib.asynccontextmanager
async def _closing(stream: AsyncIterator[_T]) -> AsyncGenerator[AsyncIterator[_T], None]:
    """Close a model stream however the loop leaves it, so its connection is released now."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


class _Turn:
    """Collects one model turn: its text, its finished calls and its `Finish`.

    Call ids must be unique within the session: the tool-call ledger is keyed by them, and a
    provider matches each `tool` message to its call by id. Some providers send an empty id, or
    reuse ids across turns (`call_0` every time); such an id is replaced by a fresh one in every
    event of the call, before anything is stored.
    """

    def __init__(self, history: Sequence[ChatMessage]) -> None:
        self.used = {call.id for message in history for call in message.tool_calls}
        self.renamed: dict[str, str] = {}
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.finish: Finish | None = None

    def _id(self, raw: str) -> str:
        new = self.renamed.get(raw)
        if new is None:
            new = raw if raw and raw not in self.used else _new_call_id()
            self.renamed[raw] = new
            self.used.add(new)
        return new

    def take(self, update: ChatUpdate) -> AgentResponseUpdate | None:
        """Record one update; return what the consumer should see (`None` for the `Finish`)."""
        match update:
            case Finish():
                self.finish = update
                return None
            case TextDelta(text=delta):
                self.text.append(delta)
            case ToolCallStarted(call_id=raw, name=name):
                if (new := self._id(raw)) != raw:
                    return ToolCallStarted(new, name)
            case ToolCallArgumentsDelta(call_id=raw, delta=delta):
                if (new := self._id(raw)) != raw:
                    return ToolCallArgumentsDelta(new, delta)
            case ToolCallEnded(call=call):
                new = self._id(call.id)
                if any(c.id == new for c in self.calls):  # two calls of one turn share an id
                    new = _new_call_id()
                    self.used.add(new)
                if new != call.id:
                    call = call.model_copy(update={"id": new})
                    update = ToolCallEnded(call)
                self.calls.append(call)
        return update


class FunctionInvokingChatClient:
    """Wraps a `ChatClient` with the tool-calling loop."""

    def __init__(
        self,
        client: ChatClient,
        *,
        max_rounds: int = 10,
        approval_gate: ApprovalGate | None = None,
    ) -> None:
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, not {max_rounds!r}")
        self.client = client
        self.max_rounds = max_rounds
        self.approval_gate = approval_gate or default_gate

    def _gated(self, call: ToolCall, tools: dict[str, Tool]) -> bool:
        """Whether the call waits for a human.

        A call that cannot run (unknown tool, arguments that are not a JSON object) is never
        gated: it is answered with an error, so a card for it would ask about nothing. A gate
        that fails asks a human rather than letting the call through.
        """
        tool = tools.get(call.name)
        if tool is None:
            return False
        try:
            call.parsed_arguments()
        except ValueError:
            return False
        try:
            return bool(self.approval_gate(tool, call))
        except Exception:
            logger.exception("approval gate failed for tool %r; asking a human", call.name)
            return True

    async def run(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool],
        journal: RunJournal,
        options: AgentRunOptions | None = None,
    ) -> AsyncGenerator[AgentResponseUpdate, None]:
        """Stream one run. Raises `ResumeError` (before yielding anything) for a bad resume."""
        options = options or AgentRunOptions()
        if options.max_rounds is not None and options.max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, not {options.max_rounds!r}")
        history = list(messages)
        by_name = {t.name: t for t in tools}

        if options.tool_approval_responses:
            plan = self._plan_resume(history, by_name, options.tool_approval_responses)
            async for update in self._answer_batch(plan, by_name, journal, history, resuming=True):
                yield update
        elif pending_tool_calls(history):
            raise ResumeError(
                "the conversation has tool calls waiting for decisions; "
                "resume it with tool_approval_responses"
            )

        usage: Usage | None = None
        max_rounds = options.max_rounds or self.max_rounds
        for _ in range(max_rounds):
            turn = _Turn(history)
            try:
                stream = self.client.stream(
                    history, tools=list(by_name.values()), options=options.chat
                )
                async with _closing(stream) as updates:
                    async for update in updates:
                        if (shown := turn.take(update)) is not None:
                            yield shown
            except ChatClientError as exc:
                logger.warning("model request failed: %s", exc)
                yield Finish(FinishReason.ERROR, usage, error=str(exc))
                return
            finish = turn.finish
            if finish is None:
                yield Finish(FinishReason.ERROR, usage, error="the model stream ended early")
                return
            if finish.usage is not None:
                usage = finish.usage if usage is None else usage + finish.usage
            content = "".join(turn.text) or None
            calls = turn.calls

            if not calls:
                reply = ChatMessage.assistant(content)
                await journal.append([reply])
                reason = finish.finish_reason
                if reason not in _CONSUMER_REASONS:  # e.g. said tool_calls but sent none
                    reason = FinishReason.STOP
                yield Finish(reason, usage)
                return

            gated = [c for c in calls if self._gated(c, by_name)]
            gated_ids = {c.id for c in gated}
            if gated_ids:
                calls = [c.model_copy(update={"gated": c.id in gated_ids}) for c in calls]
            assistant = ChatMessage.assistant(content, tuple(calls))
            if gated:
                requests = [
                    ToolApprovalRequest(
                        call_id=c.id,
                        name=c.name,
                        arguments=c.display_arguments(),
                        description=by_name[c.name].description,
                        digest=call_digest(c.name, c.display_arguments()),
                    )
                    for c in gated
                ]
                held = [
                    ToolCallHeld(c.id, c.name, c.display_arguments())
                    for c in calls
                    if c.id not in gated_ids
                ]
                await journal.pause(assistant, requests, held)
                for request in requests:
                    yield request
                for item in held:
                    yield item
                yield Finish(FinishReason.AWAITING_APPROVAL, usage)
                return

            await journal.append([assistant])
            history.append(assistant)
            plan = [(call, None) for call in calls]
            async for update in self._answer_batch(plan, by_name, journal, history, resuming=False):
                yield update

        yield Finish(FinishReason.MAX_ROUNDS, usage)

    def _plan_resume(
        self,
        history: list[ChatMessage],
        tools: dict[str, Tool],
        responses: Sequence[ToolApprovalResponse],
    ) -> list[tuple[ToolCall, ToolApprovalResponse | None]]:
        """Check a resume is complete and names only pending calls, before anything runs."""
        pending = pending_tool_calls(history)
        if not pending:
            raise ResumeError("there are no pending tool calls to resume (already resumed?)")
        pending_ids = {c.id for c in pending}
        by_id: dict[str, ToolApprovalResponse] = {}
        for response in responses:
            if response.call_id not in pending_ids:
                raise ResumeError(f"response names call {response.call_id!r}, which is not pending")
            if response.call_id in by_id:
                raise ResumeError(f"call {response.call_id!r} has more than one response")
            by_id[response.call_id] = response
        if any(c.gated for c in pending):
            # The batch says which calls the cards asked about; the gate today may differ.
            needs_decision = [c for c in pending if c.gated]
        else:
            needs_decision = [c for c in pending if self._gated(c, tools)]
        undecided = [c.id for c in needs_decision if c.id not in by_id]
        if undecided:
            raise ResumeError(f"calls still waiting for a decision: {', '.join(undecided)}")
        return [(call, by_id.get(call.id)) for call in pending]

    async def _answer_batch(
        self,
        plan: Sequence[tuple[ToolCall, ToolApprovalResponse | None]],
        tools: dict[str, Tool],
        journal: RunJournal,
        history: list[ChatMessage],
        *,
        resuming: bool,
    ) -> AsyncGenerator[AgentResponseUpdate, None]:
        """Answer every call of a batch with exactly one `tool` message, in the model's order.

        Answers that run nothing (a rejection, an expiry, an unknown tool, bad arguments) are
        written only after the next runnable call is claimed with `start_tool_call`, so a resume
        that loses the race for a batch to another one writes nothing at all.
        """
        deferred: list[tuple[ToolCall, str, bool]] = []
        for call, response in plan:
            if response is not None and not response.approved:
                deferred.append((call, response.tool_message_text(), False))
                continue
            ready = _prepare(call, tools)
            if isinstance(ready, str):
                deferred.append((call, ready, True))
                continue
            try:
                await journal.start_tool_call(call)
            except ToolCallAlreadyStarted as exc:
                if not resuming:
                    raise
                raise ResumeError(
                    f"call {call.id!r} is already {exc.status}, so this resume stops: "
                    "another resume has claimed the batch, or it was interrupted"
                ) from exc
            for item in deferred:
                yield await _answer_unrun(journal, history, *item)
            deferred.clear()
            tool, arguments = ready
            content, is_error = await _invoke(call, tool, arguments)
            message = ChatMessage.tool(content, call.id)
            await journal.finish_tool_call(call, message, is_error=is_error)
            history.append(message)
            yield ToolResult(call.id, call.name, content, is_error=is_error)
        for item in deferred:
            yield await _answer_unrun(journal, history, *item)


_CONSUMER_REASONS = frozenset({FinishReason.STOP, FinishReason.LENGTH, FinishReason.CONTENT_FILTER})
"""Finish reasons of a model turn that reach the consumer as they are."""


def _prepare(call: ToolCall, tools: dict[str, Tool]) -> tuple[Tool, dict[str, Any]] | str:
    """The tool and arguments to run the call with, or the error that answers it instead."""
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return f"Error: unknown tool {call.name!r}; available tools: {known}"
    try:
        return tool, call.parsed_arguments()
    except ValueError as exc:
        return f"Error: {exc}"


async def _invoke(call: ToolCall, tool: Tool, arguments: dict[str, Any]) -> tuple[str, bool]:
    """Run the tool; whatever it raises becomes an error result for the model."""
    try:
        result: object = await tool.invoke(arguments)
    except ToolError as exc:
        return f"Error: {exc}", True
    except Exception as exc:
        logger.exception("tool %r raised", call.name)
        return f"Error: tool {call.name!r} failed: {type(exc).__name__}: {exc}", True
    return (result if isinstance(result, str) else _to_text(result)), False


async def _answer_unrun(
    journal: RunJournal,
    history: list[ChatMessage],
    call: ToolCall,
    content: str,
    is_error: bool,
) -> ToolResult:
    """Answer a call that does not run (rejected, expired, unknown, bad arguments)."""
    message = ChatMessage.tool(content, call.id)
    await journal.append([message])
    history.append(message)
    return ToolResult(call.id, call.name, content, is_error=is_error)
