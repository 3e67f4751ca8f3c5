"""The tool loop: `FunctionInvokingChatClient`, the approval gate and the resume path.

Pause, collect, resume, with the approval semantics of `docs/architecture.md`: only gated calls
are asked about, siblings are held and run on resume so every `tool_call_id` is answered, a
resume must decide every gated call and name only pending ones, and the internal `TOOL_CALLS`
finish never reaches the consumer. One model turn is collected by `TurnCollector`; one tool runs
in `_run_tool` (its errors become the model's error result, its duration is measured, and
`current_call_id` names the call while it runs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .approvals import (
    AgentRunOptions,
    ApprovalGate,
    ToolApprovalResponse,
    pending_tool_calls,
    undecided_calls,
)
from .chat_client import ChatClient, TurnCollector, closing, within
from .exceptions import (
    ChatClientError,
    ProviderError,
    ResumeError,
    ToolCallAlreadyStarted,
    ToolError,
    ToolTimeout,
)
from .messages import (
    AgentResponseUpdate,
    CallOutcome,
    ChatMessage,
    Edited,
    Finish,
    FinishReason,
    ToolApprovalRequest,
    ToolCall,
    ToolCallHeld,
    ToolResult,
    ToolRunning,
    Usage,
    call_digest,
    edited_result,
    render_outcome,
)
from .tools import Tool, _to_text, current_call_id

__all__ = ["ApprovalGate", "FunctionInvokingChatClient", "RequestView", "RunJournal"]

logger = logging.getLogger("agent_core")


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


class RequestView(Protocol):
    """Turns the run's history into what one request sends (compaction, `agent_core._compact`)."""

    async def prepare(
        self, history: Sequence[ChatMessage], tools: Sequence[Tool], *, harder: bool = False
    ) -> list[ChatMessage]: ...

    def bound_answer(self, text: str | None) -> str | None:
        """A final answer as stored for later requests."""
        ...

    @property
    def reply_tokens(self) -> int:
        """The reply bound sent with every request (`max_tokens`) unless the run sets one."""
        ...

    @property
    def advice(self) -> str:
        """What to tell a person when even a compacted request does not fit."""
        ...

    async def shrink(
        self, history: Sequence[ChatMessage], tools: Sequence[Tool], window: int | None
    ) -> list[ChatMessage]:
        """The request again, smaller, after the provider refused it as too long (`window`:
        the model's real window, if the refusal said it)."""
        ...


_SHRINKS = 3
"""How often a request refused as too long is made smaller and sent again."""


_Plan = Sequence[tuple[ToolCall, ToolApprovalResponse | None]]
"""Each call of a batch, in the model's order, with the decision on it (`None`: none needed)."""


@dataclass(frozen=True, slots=True)
class _Unrun:
    """A call answered without running: its content, and why (an outcome, or else an error)."""

    call: ToolCall
    content: str
    outcome: CallOutcome | None

    @property
    def is_error(self) -> bool:
        return self.outcome is None


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

    async def _gated(
        self, call: ToolCall, tools: dict[str, Tool], gate: ApprovalGate | None = None
    ) -> bool:
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
            answer = (gate or self.approval_gate)(tool, call)
            if inspect.isawaitable(answer):
                answer = await answer
            return bool(answer)
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
        view: RequestView | None = None,
    ) -> AsyncGenerator[AgentResponseUpdate, None]:
        """Stream one run. Raises `ResumeError` (before yielding anything) for a bad resume.
        With a `view`, each request sends `view.prepare(history)` instead of the whole history,
        and a provider's "context length exceeded" is retried once with a harder compaction."""
        options = options or AgentRunOptions()
        if options.max_rounds is not None and options.max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, not {options.max_rounds!r}")
        history = list(messages)
        by_name = {t.name: t for t in tools}

        if options.tool_approval_responses:
            plan = await self._plan_resume(history, by_name, options)
            async for update in self._answer_batch(plan, by_name, journal, history, resuming=True):
                yield update
        elif pending_tool_calls(history):
            raise ResumeError(
                "the conversation has tool calls waiting for decisions; "
                "resume it with tool_approval_responses"
            )

        usage: Usage | None = None
        for _ in range(options.max_rounds or self.max_rounds):
            turn = TurnCollector(history)
            streamed = self._stream_turn(turn, history, by_name, options, view)
            async with contextlib.aclosing(streamed) as s:
                async for update in s:
                    yield update
            finish = turn.finish
            if turn.error is not None or finish is None:
                error = turn.error or "the model stream ended early"
                yield Finish(FinishReason.ERROR, usage, error=error)
                return
            if finish.usage is not None:
                usage = finish.usage if usage is None else usage + finish.usage

            if not turn.calls:
                content = turn.content if view is None else view.bound_answer(turn.content)
                await journal.append([ChatMessage.assistant(content)])
                yield Finish(_consumer_reason(finish.finish_reason), usage)
                return

            assistant, requests, held = await self._batch(turn, by_name, options.approval_gate)
            if requests:
                await journal.pause(assistant, requests, held)
                for request in requests:
                    yield request
                for item in held:
                    yield item
                yield Finish(FinishReason.AWAITING_APPROVAL, usage)
                return

            await journal.append([assistant])
            history.append(assistant)
            plan = [(call, None) for call in assistant.tool_calls]
            async for update in self._answer_batch(plan, by_name, journal, history, resuming=False):
                yield update

        yield Finish(FinishReason.MAX_ROUNDS, usage)

    async def _stream_turn(
        self,
        turn: TurnCollector,
        history: Sequence[ChatMessage],
        tools: dict[str, Tool],
        options: AgentRunOptions,
        view: RequestView | None = None,
    ) -> AsyncGenerator[AgentResponseUpdate, None]:
        """Stream one model turn into `turn`; a failed request is kept as `turn.error`.

        A request refused as too long for the context, before anything streamed, is made to
        fit the window the refusal states (or a halved budget) and sent again, up to
        `_SHRINKS` times: the user gets an answer, not the provider's error. Every request
        carries the view's reply bound unless the run's options set one."""
        listed = list(tools.values())
        request = list(history) if view is None else await view.prepare(history, listed)
        chat = options.chat
        shrinks = 0
        while True:
            if view is not None and options.chat.max_tokens is None:
                chat = dataclasses.replace(options.chat, max_tokens=view.reply_tokens)
            try:
                stream = self.client.stream(request, tools=listed, options=chat)
                async with closing(within(stream, options.turn_timeout)) as updates:
                    async for update in updates:
                        if (shown := turn.take(update)) is not None:
                            yield shown
                return
            except ProviderError as exc:
                if view is None or not exc.context_exceeded or turn.started:
                    logger.warning("model request failed: %s", exc)
                    turn.error = str(exc)
                    return
                if shrinks >= _SHRINKS:
                    logger.warning("model request still too long after compacting: %s", exc)
                    turn.error = (
                        "the conversation does not fit the model's context window even after "
                        f"compacting it {shrinks} times; {view.advice} ({exc})"
                    )
                    return
                shrinks += 1
                request = await view.shrink(history, listed, exc.context_window)
            except ChatClientError as exc:
                logger.warning("model request failed: %s", exc)
                turn.error = str(exc)
                return

    async def _batch(
        self, turn: TurnCollector, tools: dict[str, Tool], gate: ApprovalGate | None
    ) -> tuple[ChatMessage, list[ToolApprovalRequest], list[ToolCallHeld]]:
        """The assistant message of a turn's calls, with the approval requests and held calls
        of the batch if any call is gated (both empty otherwise)."""
        calls = turn.calls
        gated_ids = {c.id for c in calls if await self._gated(c, tools, gate)}
        if not gated_ids:
            return ChatMessage.assistant(turn.content, tuple(calls)), [], []
        calls = [c.model_copy(update={"gated": c.id in gated_ids}) for c in calls]
        requests = [
            ToolApprovalRequest(
                call_id=c.id,
                name=c.name,
                arguments=c.display_arguments(),
                description=tools[c.name].description,
                digest=call_digest(c.name, c.display_arguments()),
            )
            for c in calls
            if c.gated
        ]
        held = [ToolCallHeld(c.id, c.name, c.display_arguments()) for c in calls if not c.gated]
        return ChatMessage.assistant(turn.content, tuple(calls)), requests, held

    async def _plan_resume(
        self, history: list[ChatMessage], tools: dict[str, Tool], options: AgentRunOptions
    ) -> _Plan:
        """Check a resume is complete and names only pending calls, before anything runs."""
        responses = options.tool_approval_responses
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
            gated = [c.id for c in pending if c.gated]
        else:
            gate = options.approval_gate
            gated = [c.id for c in pending if await self._gated(c, tools, gate)]
        undecided = undecided_calls(gated, by_id)
        if undecided:
            raise ResumeError(f"calls still waiting for a decision: {', '.join(undecided)}")
        return [(call, by_id.get(call.id)) for call in pending]

    async def _answer_batch(
        self,
        plan: _Plan,
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
        deferred: list[_Unrun] = []
        for call, response in plan:
            outcome = response.outcome if response is not None else None
            if outcome is not None:
                deferred.append(_Unrun(call, render_outcome(outcome), outcome))
                continue
            ready = _prepare(call, tools)
            if isinstance(ready, str):
                deferred.append(_Unrun(call, ready, None))
                continue
            await _claim(journal, call, resuming=resuming)
            for item in deferred:
                yield await _answer_unrun(journal, history, item)
            deferred.clear()
            tool, arguments = ready
            edit = _edit_of(response, arguments)
            if edit is not None:
                arguments = edit.arguments
            yield ToolRunning(call.id, call.name)
            ran = await _run_tool(call, tool, arguments)
            content = ran.content if edit is None else edited_result(edit, ran.content)
            message = ChatMessage.tool(content, call.id)
            await journal.finish_tool_call(call, message, is_error=ran.is_error)
            history.append(message)
            yield ToolResult(
                call.id,
                call.name,
                content,
                is_error=ran.is_error,
                seconds=ran.seconds,
                timed_out=ran.timed_out,
            )
        for item in deferred:
            yield await _answer_unrun(journal, history, item)


_CONSUMER_REASONS = frozenset({FinishReason.STOP, FinishReason.LENGTH, FinishReason.CONTENT_FILTER})
"""Finish reasons of a model turn that reach the consumer as they are."""


def _consumer_reason(reason: FinishReason) -> FinishReason:
    """The reason a consumer sees for a turn without calls (e.g. said tool_calls, sent none)."""
    return reason if reason in _CONSUMER_REASONS else FinishReason.STOP


async def _claim(journal: RunJournal, call: ToolCall, *, resuming: bool) -> None:
    """Mark the call started; a resume that finds it started already stops with `ResumeError`."""
    try:
        await journal.start_tool_call(call)
    except ToolCallAlreadyStarted as exc:
        if not resuming:
            raise
        raise ResumeError(
            f"call {call.id!r} is already {exc.status}, so this resume stops: "
            "another resume has claimed the batch, or it was interrupted"
        ) from exc


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


def _edit_of(response: ToolApprovalResponse | None, original: dict[str, Any]) -> Edited | None:
    """The human's edit of an approved call, if its arguments were changed before approval."""
    if response is None or not response.approved or response.edited_arguments is None:
        return None
    return Edited(response.decided_by, original, dict(response.edited_arguments))


async def _answer_unrun(
    journal: RunJournal, history: list[ChatMessage], unrun: _Unrun
) -> ToolResult:
    """Answer a call that does not run (rejected, expired, unknown, bad arguments)."""
    call = unrun.call
    message = ChatMessage.tool(unrun.content, call.id)
    await journal.append([message])
    history.append(message)
    return ToolResult(call.id, call.name, unrun.content, unrun.is_error, unrun.outcome)


@dataclass(frozen=True, slots=True)
class _Ran:
    content: str
    is_error: bool
    seconds: float
    timed_out: bool = False


async def _run_tool(call: ToolCall, tool: Tool, arguments: dict[str, Any]) -> _Ran:
    """Run the tool (`current_call_id` names the call meanwhile); whatever it raises becomes an
    error result for the model (`ToolTimeout`: a timed-out one). Also says how long it ran."""
    token, started = current_call_id.set(call.id), time.monotonic()
    timed_out = False
    try:
        result: object = await tool.invoke(arguments)
        content, is_error = _to_text(result), False  # _to_text also replaces lone surrogates
    except ToolError as exc:
        content, is_error, timed_out = f"Error: {exc}", True, isinstance(exc, ToolTimeout)
    except Exception as exc:
        logger.exception("tool %r raised", call.name)
        content, is_error = f"Error: tool {call.name!r} failed: {type(exc).__name__}: {exc}", True
    finally:
        current_call_id.reset(token)
    return _Ran(_to_text(content), is_error, time.monotonic() - started, timed_out)
