"""The tool loop: `FunctionInvokingChatClient`, the approval gate and the resume path.

This is the seed design (pause, collect, resume) with DESIGN.md's gaps closed: only gated calls
are asked about, siblings are held and run on resume so every `tool_call_id` is answered, a
resume must decide every gated call and name only pending ones, and the internal `TOOL_CALLS`
finish never reaches the consumer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from .approvals import AgentRunOptions, ToolApprovalResponse
from .chat_client import ChatClient
from .events import (
    AgentResponseUpdate,
    Finish,
    FinishReason,
    TextDelta,
    ToolApprovalRequest,
    ToolCallEnded,
    ToolCallHeld,
    ToolResult,
    Usage,
)
from .exceptions import ChatClientError, ResumeError, ToolError
from .messages import ChatMessage, ToolCall, call_digest
from .tools import Tool

__all__ = ["ApprovalGate", "FunctionInvokingChatClient", "RunJournal", "pending_tool_calls"]

logger = logging.getLogger("agent_core")

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


def _arguments_for_display(call: ToolCall) -> Any:
    try:
        return call.parsed_arguments()
    except ValueError:
        return call.arguments


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
        tool = tools.get(call.name)
        return tool is not None and self.approval_gate(tool, call)

    async def run(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool],
        journal: RunJournal,
        options: AgentRunOptions | None = None,
    ) -> AsyncIterator[AgentResponseUpdate]:
        """Stream one run. Raises `ResumeError` (before yielding anything) for a bad resume."""
        options = options or AgentRunOptions()
        history = list(messages)
        by_name = {t.name: t for t in tools}

        if options.tool_approval_responses:
            plan = self._plan_resume(history, by_name, options.tool_approval_responses)
            for call, response in plan:
                if response is None or response.approved:
                    async for update in self._execute(call, by_name, journal, history):
                        yield update
                else:
                    message = ChatMessage.tool(response.tool_message_text(), call.id)
                    await journal.append([message])
                    history.append(message)
                    yield ToolResult(call.id, call.name, message.content or "")
        elif pending_tool_calls(history):
            raise ResumeError(
                "the conversation has tool calls waiting for decisions; "
                "resume it with tool_approval_responses"
            )

        usage: Usage | None = None
        max_rounds = options.max_rounds or self.max_rounds
        for _ in range(max_rounds):
            text: list[str] = []
            calls: list[ToolCall] = []
            finish: Finish | None = None
            try:
                async for update in self.client.stream(
                    history, tools=list(by_name.values()), options=options.chat
                ):
                    match update:
                        case Finish():
                            finish = update
                            continue
                        case TextDelta(text=delta):
                            text.append(delta)
                        case ToolCallEnded(call=call):
                            calls.append(call)
                    yield update
            except ChatClientError as exc:
                logger.warning("model request failed: %s", exc)
                yield Finish(FinishReason.ERROR, usage, error=str(exc))
                return
            if finish is None:
                yield Finish(FinishReason.ERROR, usage, error="the model stream ended early")
                return
            if finish.usage is not None:
                usage = finish.usage if usage is None else usage + finish.usage
            content = "".join(text) or None

            if not calls:
                reply = ChatMessage.assistant(content)
                await journal.append([reply])
                reason = finish.finish_reason
                if reason is FinishReason.TOOL_CALLS:  # said tool_calls but sent none
                    reason = FinishReason.STOP
                yield Finish(reason, usage)
                return

            assistant = ChatMessage.assistant(content, tuple(calls))
            gated = [c for c in calls if self._gated(c, by_name)]
            gated_ids = {c.id for c in gated}
            if gated:
                requests = [
                    ToolApprovalRequest(
                        call_id=c.id,
                        name=c.name,
                        arguments=_arguments_for_display(c),
                        description=by_name[c.name].description,
                        digest=call_digest(c.name, _arguments_for_display(c)),
                    )
                    for c in gated
                ]
                held = [
                    ToolCallHeld(c.id, c.name, _arguments_for_display(c))
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
            for call in calls:
                async for update in self._execute(call, by_name, journal, history):
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
        undecided = [c.id for c in pending if self._gated(c, tools) and c.id not in by_id]
        if undecided:
            raise ResumeError(f"calls still waiting for a decision: {', '.join(undecided)}")
        return [(call, by_id.get(call.id)) for call in pending]

    async def _execute(
        self,
        call: ToolCall,
        tools: dict[str, Tool],
        journal: RunJournal,
        history: list[ChatMessage],
    ) -> AsyncIterator[AgentResponseUpdate]:
        """Run one call and answer it with exactly one tool message."""
        tool = tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(tools)) or "none"
            content = f"Error: unknown tool {call.name!r}; available tools: {known}"
            message = ChatMessage.tool(content, call.id)
            await journal.append([message])
            history.append(message)
            yield ToolResult(call.id, call.name, content, is_error=True)
            return
        try:
            arguments = call.parsed_arguments()
        except ValueError as exc:
            content = f"Error: {exc}"
            message = ChatMessage.tool(content, call.id)
            await journal.append([message])
            history.append(message)
            yield ToolResult(call.id, call.name, content, is_error=True)
            return

        await journal.start_tool_call(call)
        is_error = False
        try:
            content = await tool.invoke(arguments)
        except ToolError as exc:
            content, is_error = f"Error: {exc}", True
        except Exception as exc:
            logger.exception("tool %r raised", call.name)
            content = f"Error: tool {call.name!r} failed: {type(exc).__name__}: {exc}"
            is_error = True
        message = ChatMessage.tool(content, call.id)
        await journal.finish_tool_call(call, message, is_error=is_error)
        history.append(message)
        yield ToolResult(call.id, call.name, content, is_error=is_error)
