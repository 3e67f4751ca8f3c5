"""The tool loop and the agent around it, driven by `agent_core.testing`'s in-process chat
clients.

Each test names the behaviour of "Approval semantics" in `docs/architecture.md` or of the issue
that it pins; each would fail without it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent_core import (
    AgentResponseUpdate,
    AgentRunOptions,
    AgentSession,
    ApprovalRequiredTool,
    CallOutcome,
    Cancelled,
    ChatClientAgent,
    ChatMessage,
    Expired,
    Finish,
    FinishReason,
    InMemorySessionStore,
    PendingApprovalError,
    ProviderError,
    Rejected,
    ResumeError,
    StoredContext,
    StreamError,
    TextDelta,
    Tool,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCall,
    ToolCallAlreadyStarted,
    ToolCallArgumentsDelta,
    ToolCallEnded,
    ToolCallHeld,
    ToolCallStarted,
    ToolError,
    ToolResult,
    ToolTimeout,
    Usage,
    call_digest,
    pending_tool_calls,
    tool,
)
from agent_core.testing import (
    FunctionChatClient,
    Request,
    ScriptedChatClient,
    Turn,
    call,
    collect,
    history_problems,
)

SESSION = "s1"
WAIT = 5.0


@dataclass
class Harness:
    """An agent over a scripted client and an in-memory store, with tools that log their runs."""

    client: FunctionChatClient
    store: InMemorySessionStore = field(default_factory=InMemorySessionStore)
    ran: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    release: asyncio.Event | None = None
    """When set, `deploy` and `status` wait for it before they return (for race tests)."""
    agent: ChatClientAgent = field(init=False)
    session: AgentSession = field(default_factory=lambda: AgentSession(SESSION))

    def tools(self) -> list[Tool]:
        @tool
        async def status(service: str) -> str:
            """Show a service's status."""
            self.ran.append(("status", {"service": service}))
            if self.release is not None:
                await self.release.wait()
            return f"{service} is up"

        @tool
        async def deploy(service: str, version: str = "latest") -> str:
            """Deploy a service."""
            self.ran.append(("deploy", {"service": service, "version": version}))
            if self.release is not None:
                await self.release.wait()
            return f"deployed {service}@{version}"

        @tool
        def scale(service: str, replicas: int) -> str:
            """Scale a service."""
            self.ran.append(("scale", {"service": service, "replicas": replicas}))
            return f"{service} scaled to {replicas}"

        @tool
        async def flaky(mode: str) -> str:
            """Fails on purpose."""
            self.ran.append(("flaky", {"mode": mode}))
            if mode == "tool_error":
                raise ToolError("quota exceeded for flaky")
            if mode == "timeout":
                raise ToolTimeout("flaky timed out after 2s", 2)
            raise RuntimeError("disk on fire")

        return [status, ApprovalRequiredTool(deploy), scale, flaky]

    def build(self, **agent_kwargs: Any) -> Harness:
        agent_kwargs.setdefault("instructions", "You are OpsGate.")
        self.agent = ChatClientAgent(
            self.client, tools=self.tools(), store=self.store, **agent_kwargs
        )
        return self

    async def run(
        self,
        messages: str | None,
        options: AgentRunOptions | None = None,
    ) -> list[AgentResponseUpdate]:
        return await asyncio.wait_for(
            collect(self.agent.run(messages, self.session, options)), WAIT
        )

    async def resume(self, *responses: ToolApprovalResponse) -> list[AgentResponseUpdate]:
        return await self.run(None, AgentRunOptions().with_tool_approval_responses(responses))

    async def history(self) -> list[ChatMessage]:
        return await self.store.load_messages(SESSION)

    def names_run(self) -> list[str]:
        return [name for name, _ in self.ran]


def make(*turns: Turn | BaseException, **agent_kwargs: Any) -> Harness:
    return Harness(ScriptedChatClient(*turns)).build(**agent_kwargs)


def last_finish(updates: Sequence[AgentResponseUpdate]) -> Finish:
    """The run's final update, which must be its only `Finish`."""
    assert updates, "the run yielded nothing"
    last = updates[-1]
    assert isinstance(last, Finish), f"the run ended with {last!r}, not a Finish"
    assert [u for u in updates if isinstance(u, Finish)] == [last]
    return last


def of_type(updates: Sequence[object], kind: type[Any]) -> list[Any]:
    return [u for u in updates if isinstance(u, kind)]


def tool_messages_per_call(history: Sequence[ChatMessage]) -> Counter[str | None]:
    return Counter(m.tool_call_id for m in history if m.role == "tool")


DEPLOY = call("c_dep", "deploy", service="api")
STATUS = call("c_st", "status", service="api")


async def paused(
    batch: Sequence[ToolCall] = (DEPLOY, STATUS), *later: Turn, **agent_kwargs: Any
) -> tuple[Harness, list[AgentResponseUpdate]]:
    """A harness whose session is paused on `batch`, with `later` scripted for the resume."""
    h = make(Turn(text="On it.", tool_calls=batch, usage=Usage(10, 5, 15)), *later, **agent_kwargs)
    updates = await h.run("deploy api please")
    assert last_finish(updates).finish_reason is FinishReason.AWAITING_APPROVAL
    return h, updates


# -- plain runs ---------------------------------------------------------------------------------


async def test_text_only_run_streams_text_stores_reply_and_stops() -> None:
    h = make(Turn(text=["Hel", "lo!"], usage=Usage(3, 2, 5)))

    updates = await h.run("hi")

    assert updates == [
        TextDelta("Hel"),
        TextDelta("lo!"),
        Finish(FinishReason.STOP, Usage(3, 2, 5)),
    ]
    assert await h.history() == [ChatMessage.user("hi"), ChatMessage.assistant("Hello!")]
    (request,) = h.client.requests
    assert request.messages == (ChatMessage.system("You are OpsGate."), ChatMessage.user("hi"))
    assert request.tool_names == ["status", "deploy", "scale", "flaky"]


async def test_one_tool_round_feeds_the_result_back_to_the_model() -> None:
    h = make(Turn(tool_calls=[STATUS]), Turn(text="api is up."))

    updates = await h.run("how is api?")

    assert of_type(updates, ToolResult) == [ToolResult("c_st", "status", "api is up")]
    assert updates[-1] == Finish(FinishReason.STOP)
    assert h.ran == [("status", {"service": "api"})]
    second = h.client.requests[1].messages
    assert second[-2:] == (
        ChatMessage.assistant(None, (STATUS,)),
        ChatMessage.tool("api is up", "c_st"),
    )
    assert history_problems(second) == []
    assert await h.history() == [
        ChatMessage.user("how is api?"),
        ChatMessage.assistant(None, (STATUS,)),
        ChatMessage.tool("api is up", "c_st"),
        ChatMessage.assistant("api is up."),
    ]


async def test_parallel_calls_all_run_in_order_with_one_tool_message_each() -> None:
    batch = [
        call("c1", "status", service="web"),
        call("c2", "scale", service="web", replicas=3),
        call("c3", "status", service="db"),
    ]
    h = make(Turn(tool_calls=batch), Turn(text="All done."))

    updates = await h.run("check web and db, scale web")

    assert h.ran == [
        ("status", {"service": "web"}),
        ("scale", {"service": "web", "replicas": 3}),
        ("status", {"service": "db"}),
    ]
    assert [r.call_id for r in of_type(updates, ToolResult)] == ["c1", "c2", "c3"]
    second = h.client.requests[1].messages
    assert [m.tool_call_id for m in second if m.role == "tool"] == ["c1", "c2", "c3"]
    assert history_problems(second) == []
    assert tool_messages_per_call(await h.history()) == {"c1": 1, "c2": 1, "c3": 1}


# -- the gate (1, 2, 7) -------------------------------------------------------------------------


async def test_mixed_batch_pauses_asks_only_about_the_gated_call_and_holds_the_sibling() -> None:
    h = make(Turn(text="On it.", tool_calls=[DEPLOY, STATUS], usage=Usage(10, 5, 15)))
    updates: list[AgentResponseUpdate] = []
    stored_at_request: list[ChatMessage] | None = None

    async for update in h.agent.run("deploy api please", h.session):
        updates.append(update)
        if isinstance(update, ToolApprovalRequest) and stored_at_request is None:
            stored_at_request = await h.history()

    expected_request = ToolApprovalRequest(
        call_id="c_dep",
        name="deploy",
        arguments={"service": "api"},
        description="Deploy a service.",
        digest=call_digest("deploy", {"service": "api"}),
    )
    assert of_type(updates, ToolApprovalRequest) == [expected_request]
    assert updates[-3:] == [
        expected_request,
        ToolCallHeld("c_st", "status", {"service": "api"}),
        Finish(FinishReason.AWAITING_APPROVAL, Usage(10, 5, 15)),
    ]
    assert of_type(updates, ToolResult) == []
    assert h.ran == []
    # The assistant message with ALL its calls was stored before the stream ended.
    assert stored_at_request is not None
    gated_deploy = DEPLOY.model_copy(update={"gated": True})
    assert stored_at_request[-1] == ChatMessage.assistant("On it.", (gated_deploy, STATUS))
    assert pending_tool_calls(stored_at_request) == [gated_deploy, STATUS]
    assert h.store.pending[SESSION] == [expected_request]


@pytest.mark.parametrize(
    "batch",
    [(DEPLOY, STATUS), (STATUS, DEPLOY)],
    ids=["gated-first", "sibling-first"],
)
async def test_approved_resume_runs_gated_and_sibling_in_model_order(
    batch: tuple[ToolCall, ToolCall],
) -> None:
    h, _ = await paused(batch, Turn(text="Deployed, api is up.", usage=Usage(30, 4, 34)))

    updates = await h.resume(ToolApprovalResponse.approve("c_dep", decided_by="U1"))

    assert h.names_run() == [c.name for c in batch]
    assert [r.call_id for r in of_type(updates, ToolResult)] == [c.id for c in batch]
    assert updates[-1] == Finish(FinishReason.STOP, Usage(30, 4, 34))
    history = await h.history()
    assert tool_messages_per_call(history) == {"c_dep": 1, "c_st": 1}
    assert history_problems(history) == []
    resumed = h.client.requests[1].messages
    assert [m.tool_call_id for m in resumed if m.role == "tool"] == [c.id for c in batch]
    assert history_problems(resumed) == []


@pytest.mark.parametrize(
    ("response", "text", "outcome"),
    [
        (
            ToolApprovalResponse.reject("c_dep", "change freeze", decided_by="U42"),
            "Rejected: change freeze (rejected by U42)",
            Rejected("change freeze", "U42"),
        ),
        (ToolApprovalResponse.reject("c_dep"), "Rejected: User denied", Rejected()),
        (
            ToolApprovalResponse.reject("c_dep", decided_by="U42"),
            "Rejected: User denied (rejected by U42)",
            Rejected(by="U42"),
        ),
        (
            ToolApprovalResponse.expire("c_dep", "15m"),
            "Expired: no decision within 15m; the call was not run",
            Expired("15m"),
        ),
        (
            ToolApprovalResponse.closed("c_dep", Cancelled("U42")),
            "Rejected: cancelled by U42",
            Cancelled("U42"),
        ),
    ],
    ids=[
        "rejected-with-reason",
        "rejected-no-reason",
        "rejected-no-reason-who",
        "expired",
        "cancelled",
    ],
)
async def test_a_call_that_is_not_approved_is_answered_and_its_sibling_still_runs(
    response: ToolApprovalResponse, text: str, outcome: CallOutcome
) -> None:
    h, _ = await paused((DEPLOY, STATUS), Turn(text="Understood."))

    updates = await h.resume(response)

    assert h.ran == [("status", {"service": "api"})]
    assert of_type(updates, ToolResult) == [
        ToolResult("c_dep", "deploy", text, outcome=outcome),
        ToolResult("c_st", "status", "api is up"),
    ]
    history = await h.history()
    assert [m for m in history if m.role == "tool"] == [
        ChatMessage.tool(text, "c_dep"),
        ChatMessage.tool("api is up", "c_st"),
    ]
    assert history_problems(history) == []
    assert history_problems(h.client.requests[1].messages) == []
    assert last_finish(updates).finish_reason is FinishReason.STOP


async def test_an_approval_gate_can_decide_per_call_from_the_arguments() -> None:
    def gate(_tool: Tool, tool_call: ToolCall) -> bool:
        return bool(tool_call.parsed_arguments().get("service") == "prod")

    batch = [call("c_dev", "status", service="dev"), call("c_prod", "status", service="prod")]
    h, updates = await paused(batch, Turn(text="ok"), approval_gate=gate)

    assert [r.call_id for r in of_type(updates, ToolApprovalRequest)] == ["c_prod"]
    assert [c.call_id for c in of_type(updates, ToolCallHeld)] == ["c_dev"]
    assert h.ran == []


async def test_a_failing_approval_gate_asks_a_human_instead_of_running_the_call() -> None:
    def gate(_tool: Tool, _call: ToolCall) -> bool:
        raise RuntimeError("policy file unreadable")

    h, updates = await paused((STATUS,), approval_gate=gate)

    assert [r.call_id for r in of_type(updates, ToolApprovalRequest)] == ["c_st"]
    assert h.ran == []


async def test_a_gated_call_with_malformed_arguments_is_answered_with_an_error_not_a_card() -> None:
    broken = ToolCall(id="c_bad", name="deploy", arguments='{"service": "api"')
    h = make(Turn(tool_calls=[broken]), Turn(text="Let me retry."))

    updates = await h.run("deploy")

    assert of_type(updates, ToolApprovalRequest) == []
    (result,) = of_type(updates, ToolResult)
    assert result.is_error and "not valid JSON" in result.content
    assert last_finish(updates).finish_reason is FinishReason.STOP
    assert h.ran == []


async def test_unknown_tool_and_bad_arguments_in_a_paused_batch_are_held_and_answered() -> None:
    batch = (DEPLOY, call("c_x", "nope"), ToolCall(id="c_b", name="status", arguments="[1]"))
    h, updates = await paused(batch, Turn(text="ok"))

    assert [r.call_id for r in of_type(updates, ToolApprovalRequest)] == ["c_dep"]
    assert [c.call_id for c in of_type(updates, ToolCallHeld)] == ["c_x", "c_b"]
    resumed = await h.resume(ToolApprovalResponse.approve("c_dep"))
    results = of_type(resumed, ToolResult)
    assert [(r.call_id, r.is_error) for r in results] == [
        ("c_dep", False),
        ("c_x", True),
        ("c_b", True),
    ]
    assert history_problems(await h.history()) == []


# -- completeness, binding, exactly once (4, 5, 6) -----------------------------------------------


async def test_a_resume_that_leaves_a_gated_call_undecided_is_refused_and_changes_nothing() -> None:
    batch = (DEPLOY, call("c_dep2", "deploy", service="web"), STATUS)
    h, _ = await paused(batch, Turn(text="never reached"))
    before = await h.history()

    with pytest.raises(ResumeError, match="c_dep2"):
        await h.resume(ToolApprovalResponse.approve("c_dep"))

    assert h.ran == []
    assert await h.history() == before
    assert len(h.client.requests) == 1


@pytest.mark.parametrize(
    ("responses", "match"),
    [
        (
            [ToolApprovalResponse.approve("c_dep"), ToolApprovalResponse.approve("c_ghost")],
            "c_ghost",
        ),
        (
            [ToolApprovalResponse.approve("c_dep"), ToolApprovalResponse.reject("c_dep")],
            "more than one",
        ),
    ],
    ids=["names-a-call-not-pending", "two-responses-for-one-call"],
)
async def test_a_resume_naming_a_call_that_is_not_pending_is_refused(
    responses: list[ToolApprovalResponse], match: str
) -> None:
    h, _ = await paused((DEPLOY, STATUS), Turn(text="never reached"))
    before = await h.history()

    with pytest.raises(ResumeError, match=match):
        await h.resume(*responses)

    assert h.ran == []
    assert await h.history() == before


async def test_a_resume_when_nothing_is_pending_is_refused() -> None:
    h = make(Turn(text="hello"))
    await h.run("hi")

    with pytest.raises(ResumeError, match="no pending"):
        await h.resume(ToolApprovalResponse.approve("c_dep"))


async def test_a_second_resume_is_refused_and_no_tool_runs_twice() -> None:
    h, _ = await paused((DEPLOY, STATUS), Turn(text="Done."), Turn(text="never reached"))
    await h.resume(ToolApprovalResponse.approve("c_dep"))
    after_first = await h.history()

    with pytest.raises(ResumeError):
        await h.resume(ToolApprovalResponse.approve("c_dep"))

    assert Counter(h.names_run()) == {"deploy": 1, "status": 1}
    assert await h.history() == after_first
    assert len(h.client.requests) == 2


class SameHistoryStore(InMemorySessionStore):
    """Holds each load until `parties` loads have happened, so concurrent resumes both see the
    same paused history (as two processes reading the database at once would)."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier: asyncio.Barrier | None = None

    async def load_context(self, session_id: str) -> StoredContext:
        loaded = await super().load_context(session_id)
        if self.barrier is not None:
            await self.barrier.wait()
        return loaded


@pytest.mark.parametrize(
    "decision",
    [ToolApprovalResponse.approve("c_dep"), ToolApprovalResponse.reject("c_dep", "no")],
    ids=["approved", "rejected"],
)
async def test_a_concurrent_second_resume_loses_the_claim_and_writes_nothing(
    decision: ToolApprovalResponse,
) -> None:
    store = SameHistoryStore()
    h = Harness(ScriptedChatClient(Turn(tool_calls=[DEPLOY, STATUS]), Turn(text="Done.")), store)
    h.build()
    await h.run("deploy api")
    h.release = asyncio.Event()
    store.barrier = asyncio.Barrier(2)
    options = AgentRunOptions().with_tool_approval_responses([decision])

    first = asyncio.create_task(collect(h.agent.run(None, h.session, options)))
    second = asyncio.create_task(collect(h.agent.run(None, h.session, options)))
    done, _ = await asyncio.wait({first, second}, timeout=WAIT, return_when="FIRST_COMPLETED")
    store.barrier = None  # both resumes have loaded the paused history
    assert len(done) == 1, "one resume must be refused while the other is still running"
    loser = done.pop()
    winner = second if loser is first else first
    with pytest.raises(ResumeError) as refused:
        loser.result()
    assert isinstance(refused.value.__cause__, ToolCallAlreadyStarted)
    h.release.set()
    updates = await asyncio.wait_for(winner, WAIT)

    assert updates[-1] == Finish(FinishReason.STOP)
    expected_runs = ["deploy", "status"] if decision.approved else ["status"]
    assert h.names_run() == expected_runs
    history = await h.history()
    assert tool_messages_per_call(history) == {"c_dep": 1, "c_st": 1}
    assert history_problems(history) == []


async def test_a_call_already_started_is_never_run_again() -> None:
    h, _ = await paused((DEPLOY,), Turn(text="never reached"))
    h.store.call_status[(SESSION, "c_dep")] = "executing"  # a crash left it running

    with pytest.raises(ResumeError):
        await h.resume(ToolApprovalResponse.approve("c_dep"))

    assert h.ran == []


async def test_a_new_message_while_calls_are_pending_is_refused_and_not_stored() -> None:
    h, _ = await paused((DEPLOY, STATUS), Turn(text="never reached"))
    before = await h.history()

    with pytest.raises(PendingApprovalError):
        await h.run("hello? anyone?")

    assert await h.history() == before
    assert len(h.client.requests) == 1
    assert h.ran == []


# -- bad calls and failing tools ------------------------------------------------------------------


async def test_an_unknown_tool_is_answered_with_an_error_and_the_run_goes_on() -> None:
    h = make(Turn(tool_calls=[call("c1", "reboot_everything")]), Turn(text="Sorry."))

    updates = await h.run("reboot")

    (result,) = of_type(updates, ToolResult)
    assert result.is_error
    assert result.outcome is None  # an error, not a decision: nothing to match on
    assert "unknown tool 'reboot_everything'" in result.content
    assert "status" in result.content  # the model is told what exists
    assert h.client.requests[1].messages[-1] == ChatMessage.tool(result.content, "c1")
    assert updates[-1] == Finish(FinishReason.STOP)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [('{"service": "api"', "not valid JSON"), ('["api"]', "must be a JSON object")],
    ids=["truncated", "not-an-object"],
)
async def test_malformed_argument_json_is_answered_with_an_error_and_the_run_goes_on(
    arguments: str, problem: str
) -> None:
    bad = ToolCall(id="c1", name="status", arguments=arguments)
    h = make(Turn(tool_calls=[bad]), Turn(text="Retrying."))

    updates = await h.run("status")

    (result,) = of_type(updates, ToolResult)
    assert result.is_error and problem in result.content
    assert h.ran == []
    assert h.client.requests[1].messages[-1].content == result.content
    assert updates[-1] == Finish(FinishReason.STOP)


@pytest.mark.parametrize(
    ("arguments", "names"),
    [
        ({"service": "api", "replicas": "many"}, ["replicas", "valid integer"]),
        ({"service": "api"}, ["replicas", "Field required"]),
        ({"service": "api", "replicas": 2, "force": True}, ["force", "Extra inputs"]),
    ],
    ids=["wrong-type", "missing", "extra"],
)
async def test_tool_argument_validation_failure_goes_back_to_the_model(
    arguments: dict[str, Any], names: list[str]
) -> None:
    h = make(Turn(tool_calls=[call("c1", "scale", **arguments)]), Turn(text="Fixing."))

    updates = await h.run("scale api")

    (result,) = of_type(updates, ToolResult)
    assert result.is_error
    assert "invalid arguments for 'scale'" in result.content
    for name in names:
        assert name in result.content
    assert h.ran == []
    assert updates[-1] == Finish(FinishReason.STOP)


async def test_a_tool_that_raises_yields_an_error_result_and_the_run_goes_on() -> None:
    batch = [
        call("c1", "flaky", mode="crash"),
        call("c2", "flaky", mode="tool_error"),
        call("c3", "status", service="api"),
        call("c4", "flaky", mode="timeout"),
    ]
    h = make(Turn(tool_calls=batch), Turn(text="One thing failed."))

    updates = await h.run("go")

    assert of_type(updates, ToolResult) == [
        ToolResult("c1", "flaky", "Error: tool 'flaky' failed: RuntimeError: disk on fire", True),
        ToolResult("c2", "flaky", "Error: quota exceeded for flaky", True),
        ToolResult("c3", "status", "api is up"),
        ToolResult("c4", "flaky", "Error: flaky timed out after 2s", True, timed_out=True),
    ]
    assert h.store.call_status[(SESSION, "c1")] == "done"
    assert history_problems(h.client.requests[1].messages) == []
    assert updates[-1] == Finish(FinishReason.STOP)


# -- model failures -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        Turn(
            text="Half an ans",
            error=ProviderError("upstream overloaded", status_code=503, partial_text="Half an ans"),
        ),
        Turn(text="cut", error=StreamError("the stream ended without [DONE]")),
        ProviderError("upstream overloaded", status_code=500),
    ],
    ids=["provider-error-mid-stream", "stream-error", "error-before-output"],
)
async def test_a_model_error_finishes_with_error_and_leaves_the_session_consistent(
    failure: Turn | BaseException,
) -> None:
    h = make(
        Turn(tool_calls=[STATUS], usage=Usage(5, 1, 6)),
        failure,
        Turn(text="Recovered."),
    )

    updates = await h.run("status?")

    last = updates[-1]
    assert isinstance(last, Finish) and last.finish_reason is FinishReason.ERROR
    assert last.error and ("upstream overloaded" in last.error or "[DONE]" in last.error)
    assert last.usage == Usage(5, 1, 6)
    assert len(of_type(updates, Finish)) == 1
    history = await h.history()
    assert history[-1] == ChatMessage.tool("api is up", "c_st")  # no half-written reply
    assert history_problems(history) == []
    assert pending_tool_calls(history) == []

    again = await h.run("try again")

    assert again[-1] == Finish(FinishReason.STOP)
    assert history_problems(h.client.requests[-1].messages) == []
    assert (await h.history())[-1] == ChatMessage.assistant("Recovered.")


async def test_a_stream_that_ends_without_finish_is_an_error() -> None:
    h = make(Turn(text="partial", finish=False))

    updates = await h.run("hi")

    assert updates[-1] == Finish(FinishReason.ERROR, error="the model stream ended early")
    assert await h.history() == [ChatMessage.user("hi")]


async def test_the_internal_tool_calls_finish_never_reaches_the_consumer() -> None:
    h = make(
        Turn(tool_calls=[STATUS]),
        Turn(tool_calls=[call("c2", "status", service="db")]),
        Turn(text="Both up."),
    )

    updates = await h.run("status of api then db")

    finishes = of_type(updates, Finish)
    assert finishes == [Finish(FinishReason.STOP)]
    assert updates[-1] is finishes[0]


async def test_a_turn_that_says_tool_calls_but_sends_none_finishes_as_stop() -> None:
    h = make(Turn(text="Nothing to do.", finish_reason=FinishReason.TOOL_CALLS))

    updates = await h.run("hi")

    assert of_type(updates, Finish) == [Finish(FinishReason.STOP)]


@pytest.mark.parametrize("reason", [FinishReason.LENGTH, FinishReason.CONTENT_FILTER])
async def test_length_and_content_filter_reach_the_consumer(reason: FinishReason) -> None:
    h = make(Turn(text="trunc", finish_reason=reason))

    updates = await h.run("hi")

    assert updates[-1] == Finish(reason)
    assert (await h.history())[-1] == ChatMessage.assistant("trunc")


# -- max rounds, usage ----------------------------------------------------------------------------


async def test_max_rounds_stops_after_n_model_calls_with_a_valid_history() -> None:
    turns = [Turn(tool_calls=[call(f"c{i}", "status", service="api")]) for i in range(3)]
    h = make(*turns, Turn(text="Back again."), max_rounds=3)

    updates = await h.run("loop forever")

    assert last_finish(updates).finish_reason is FinishReason.MAX_ROUNDS
    assert len(h.client.requests) == 3
    assert h.names_run() == ["status"] * 3
    history = await h.history()
    assert history_problems(history) == []
    assert pending_tool_calls(history) == []

    await h.run("and now?")  # the session goes on after the limit
    assert history_problems(h.client.requests[-1].messages) == []


async def test_max_rounds_can_be_set_per_run() -> None:
    turns = [Turn(tool_calls=[call(f"c{i}", "status", service="api")]) for i in range(2)]
    h = make(*turns, max_rounds=10)

    updates = await h.run("go", AgentRunOptions(max_rounds=2))

    assert last_finish(updates).finish_reason is FinishReason.MAX_ROUNDS
    assert len(h.client.requests) == 2
    with pytest.raises(ValueError, match="max_rounds"):
        await h.run("go", AgentRunOptions(max_rounds=0))


async def test_usage_is_summed_across_rounds() -> None:
    h = make(
        Turn(tool_calls=[STATUS], usage=Usage(10, 5, 15)),
        Turn(tool_calls=[call("c2", "status", service="db")]),  # a provider that sent no usage
        Turn(text="done", usage=Usage(20, 7, 27)),
    )

    updates = await h.run("go")

    assert updates[-1] == Finish(FinishReason.STOP, Usage(30, 12, 42))


# -- call ids -----------------------------------------------------------------------------------


async def test_a_call_id_reused_from_an_earlier_turn_gets_a_fresh_id_everywhere() -> None:
    h = make(
        Turn(tool_calls=[call("call_0", "status", service="api")]),
        Turn(text="up"),
        Turn(tool_calls=[call("call_0", "status", service="db")]),
        Turn(text="up too"),
    )
    await h.run("api?")

    updates = await h.run("db?")

    (started,) = of_type(updates, ToolCallStarted)
    (ended,) = of_type(updates, ToolCallEnded)
    (result,) = of_type(updates, ToolResult)
    new_id = ended.call.id
    assert new_id and new_id != "call_0"
    assert started.call_id == result.call_id == new_id
    assert {d.call_id for d in of_type(updates, ToolCallArgumentsDelta)} == {new_id}
    assert h.names_run() == ["status", "status"]
    history = await h.history()
    assert history_problems(history) == []


async def test_empty_and_repeated_call_ids_in_one_batch_are_made_unique() -> None:
    batch = [
        call("", "status", service="a"),
        call("", "status", service="b"),
        call("dup", "status", service="c"),
        call("dup", "status", service="d"),
    ]
    h, updates = await paused((*batch, DEPLOY), Turn(text="ok"))

    stored = (await h.history())[-1]
    ids = [c.id for c in stored.tool_calls]
    assert all(ids) and len(set(ids)) == len(ids)
    assert [c.call_id for c in of_type(updates, ToolCallHeld)] == ids[:4]
    await h.resume(ToolApprovalResponse.approve("c_dep"))
    assert [args["service"] for _, args in h.ran[:4]] == ["a", "b", "c", "d"]
    assert history_problems(await h.history()) == []


# -- the agent around the loop ------------------------------------------------------------------


class RecordingProvider:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log
        self.seen: list[ChatMessage] = []
        self.request: list[ChatMessage] = []
        self.response: list[ChatMessage] = []

    async def on_invoking(
        self, session: AgentSession, messages: Sequence[ChatMessage]
    ) -> Sequence[ChatMessage]:
        self.log.append(f"{self.name}.on_invoking")
        self.seen = list(messages)
        return [ChatMessage.system(f"context from {self.name}")]

    async def on_invoked(
        self,
        session: AgentSession,
        request: Sequence[ChatMessage],
        response: Sequence[ChatMessage],
    ) -> None:
        self.log.append(f"{self.name}.on_invoked")
        self.request = list(request)
        self.response = list(response)


async def test_context_providers_run_in_order_and_their_messages_are_sent_not_stored() -> None:
    log: list[str] = []
    first, second = RecordingProvider("first", log), RecordingProvider("second", log)
    h = make(
        Turn(tool_calls=[STATUS]),
        Turn(text="api is up."),
        context_providers=[first, second],
    )

    await h.run("how is api?")

    assert log == [
        "first.on_invoking",
        "second.on_invoking",
        "first.on_invoked",
        "second.on_invoked",
    ]
    assert first.seen == [ChatMessage.user("how is api?")]
    context = (
        ChatMessage.system("You are OpsGate."),
        ChatMessage.system("context from first"),
        ChatMessage.system("context from second"),
    )
    for request in h.client.requests:
        assert request.messages[:3] == context
    history = await h.history()
    assert all(m.role != "system" for m in history)
    produced = [
        ChatMessage.assistant(None, (STATUS,)),
        ChatMessage.tool("api is up", "c_st"),
        ChatMessage.assistant("api is up."),
    ]
    assert history == [ChatMessage.user("how is api?"), *produced]
    for provider in (first, second):
        assert provider.request == [ChatMessage.user("how is api?")]
        assert provider.response == produced


async def test_an_abandoned_run_closes_the_model_stream_at_once() -> None:
    h = make(Turn(text=["a", "b", "c"]))
    stream = h.agent.run("hi", h.session)

    first = await asyncio.wait_for(anext(stream), WAIT)
    await stream.aclose()

    assert first == TextDelta("a")
    assert h.client.streams_closed == 1


async def test_a_resume_asks_for_the_decisions_the_pause_asked_for_even_if_the_gate_changed() -> (
    None
):
    strict = {"on": False}

    def gate(tool_: Tool, tool_call: ToolCall) -> bool:
        return tool_.requires_approval() or strict["on"]

    h, _ = await paused((DEPLOY, STATUS), Turn(text="done"), approval_gate=gate)
    [paused_message] = [m for m in await h.history() if m.tool_calls]
    assert [c.gated for c in paused_message.tool_calls] == [True, False]
    assert all(
        "gated" not in json_call for json_call in map(str, paused_message.to_wire()["tool_calls"])
    )

    strict["on"] = True  # the policy now gates `status` too; its card was never shown
    updates = await h.resume(ToolApprovalResponse.approve("c_dep"))
    assert last_finish(updates).finish_reason is FinishReason.STOP
    assert h.names_run() == ["deploy", "status"]


async def test_a_relaxed_gate_does_not_let_an_undecided_call_run() -> None:
    lax = {"on": False}

    def gate(tool_: Tool, tool_call: ToolCall) -> bool:
        return tool_.requires_approval() and not lax["on"]

    h, _ = await paused((DEPLOY, STATUS), approval_gate=gate)
    lax["on"] = True  # the policy no longer gates deploy, but a card asked about it
    with pytest.raises(ResumeError, match="c_dep"):
        await h.resume(ToolApprovalResponse.approve("c_st"))  # nothing said about deploy
    assert h.ran == []


# -- outcomes and the function chat client --------------------------------------------------------


async def test_consumers_tell_unrun_calls_apart_by_outcome_not_by_text() -> None:
    batch = (DEPLOY, call("c_dep2", "deploy", service="web"), STATUS)
    h, _ = await paused(batch, Turn(text="Noted."))

    updates = await h.resume(
        ToolApprovalResponse.reject("c_dep", "freeze", decided_by="U42"),
        ToolApprovalResponse.expire("c_dep2", "15m"),
    )

    seen: list[str] = []
    for result in of_type(updates, ToolResult):
        match result.outcome:
            case Rejected(reason=reason, by=by):
                seen.append(f"{result.call_id} rejected by {by}: {reason}")
            case Expired(ttl=ttl):
                seen.append(f"{result.call_id} expired after {ttl}")
            case None:
                seen.append(f"{result.call_id} ran")
            case other:
                seen.append(f"{result.call_id} {other.kind}")
    assert seen == ["c_dep rejected by U42: freeze", "c_dep2 expired after 15m", "c_st ran"]
    assert h.names_run() == ["status"]
    assert history_problems(await h.history()) == []


async def test_a_function_chat_client_answers_from_what_the_model_is_sent() -> None:
    def model(messages: Sequence[ChatMessage], request: Request) -> Turn | str:
        last = messages[-1]
        if last.role == "tool":
            return f"status says: {last.content}"
        assert "status" in request.tool_names
        return Turn(tool_calls=[call("c1", "status", service=last.content or "")])

    client = FunctionChatClient(model)
    h = Harness(client).build()

    updates = await h.run("api")

    assert of_type(updates, ToolResult) == [ToolResult("c1", "status", "api is up")]
    assert of_type(updates, TextDelta) == [TextDelta("status says: api is up")]
    assert updates[-1] == Finish(FinishReason.STOP)
    assert len(client.requests) == 2
    assert client.streams_closed == 2


async def test_an_async_function_chat_client_and_its_failure() -> None:
    async def model(messages: Sequence[ChatMessage], request: Request) -> str:
        if len(messages) > 2:
            raise ProviderError("the model is overloaded", status_code=529)
        return "hi"

    agent = ChatClientAgent(FunctionChatClient(model))
    session = AgentSession("fn")

    first = await asyncio.wait_for(collect(agent.run("hello", session)), WAIT)
    second = await asyncio.wait_for(collect(agent.run("again", session)), WAIT)

    assert first == [TextDelta("hi"), Finish(FinishReason.STOP)]
    assert second == [Finish(FinishReason.ERROR, error="the model is overloaded")]
