"""The bot's Prometheus metrics, behind typed methods so no caller ever builds a label string.

Every label value comes from a fixed `Literal` set, the configured tool list or Slack's method
names, so the number of series stays bounded: never a user, channel or thread id as a label.
Each `Metrics` owns its own `CollectorRegistry` (not prometheus-client's global one), so a
process (or a test) can hold several side by side.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Final, Literal, get_args

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from agent_core.exceptions import ChatClientError, ProviderError, StreamError

__all__ = [
    "DECISION_BUCKETS",
    "OTHER",
    "TOOL_BUCKETS",
    "Decision",
    "FeedbackValue",
    "LLMErrorKind",
    "McpCallOutcome",
    "Metrics",
    "RunOutcome",
    "ShadowDirection",
    "ToolOutcome",
    "classify_llm_error",
]

RunOutcome = Literal["completed", "answer_lost", "failed", "cancelled", "interrupted"]
"""How a run ended: a final answer, a final answer Slack never took (its last write refused
or rate limited past the deadline), an error, "Cancel run", or a restart cut it short.

A run that pauses for approval has not ended; it is counted once, when it finally does."""

Decision = Literal["approved", "edited", "allowed", "rejected", "expired", "cancelled"]
"""What became of an approval card. `edited` and `allowed` are approvals given with the Edit
and "Allow for" buttons; `cancelled` is "Cancel run" while the card waited."""

ToolOutcome = Literal["ok", "error", "timeout", "interrupted", "rejected", "expired", "cancelled"]
"""How one tool call ended: it ran (`ok`, `error`, `timeout`), the process stopped under it or
before it began (`interrupted`), or it never ran (`rejected`, `expired`, `cancelled`: those are
observed at 0 seconds, so the histogram's count holds every call)."""

ShadowDirection = Literal["looser", "tighter"]
"""How the shadow policy's verdict on a live call differs from the live one."""

FeedbackValue = Literal["good", "bad"]
"""A click on the feedback buttons under a final answer."""

McpCallOutcome = Literal["ok", "error", "timeout", "unavailable", "cancelled"]
"""How one MCP `tools/call` ended: answered (`ok`), answered with an error or a malformed result
(`error`), no answer within `call_timeout` (`timeout`: the request was cancelled), the server
not running or the connection lost (`unavailable`), or the run stopped waiting (`cancelled`)."""

LLMErrorKind = Literal[
    "rate_limited",
    "server_error",
    "request_error",
    "provider",
    "stream",
    "timeout",
    "connection",
    "other",
]
"""Why a model request failed; `classify_llm_error` maps an exception onto one of these."""

OTHER: Final = "other"
"""The label for a tool outside the configured list or a malformed Slack method name."""

DECISION_BUCKETS: Final = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
"""Seconds from card posted to decision: humans answer in seconds to hours."""

TOOL_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Seconds one tool execution took."""

DropReason = Literal["ratelimited", "slack_error", "store"]
OUTBOX_PRIORITIES: Final = ("0", "1", "2", "3")
"""The outbox's priorities (`bot.slack.outbox`): cards, answers, notices, Home tabs/reactions."""
_SLACK_METHOD = re.compile(r"[a-z]+(?:\.[a-zA-Z]+){1,3}")


class Metrics:
    """The metric families the README's Operations section lists, in a registry of their own.

    `tools` is the configured tool list; durations of any other tool are recorded as "other"
    (`add_tools` extends the list, e.g. when an MCP server reports its tools).
    """

    def __init__(self, tools: Iterable[str] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._tools: set[str] = set()
        self.add_tools(tools)
        r = self.registry
        self._runs = Counter(
            "opsgate_runs", "Agent runs ended, by outcome.", ["outcome"], registry=r
        )
        self._pending = Gauge(
            "opsgate_pending_approvals", "Tool calls waiting for a human decision.", registry=r
        )
        self._decisions = Counter(
            "opsgate_decisions", "Approval cards decided, by decision.", ["decision"], registry=r
        )
        self._decision_seconds = Histogram(
            "opsgate_decision_seconds",
            "Seconds from an approval card being posted to its decision, by rule and outcome.",
            ["rule", "outcome"],
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self._escalations = Counter(
            "opsgate_escalations",
            "Escalation steps passed by waiting calls, by rule and step.",
            ["rule", "step"],
            registry=r,
        )
        self._reminders = Counter(
            "opsgate_reminders", "Reminders sent to approvers by direct message.", registry=r
        )
        self._tool_seconds = Histogram(
            "opsgate_tool_seconds",
            "Seconds one tool execution took, by tool and outcome.",
            ["tool", "outcome"],
            buckets=TOOL_BUCKETS,
            registry=r,
        )
        self._llm_errors = Counter(
            "opsgate_llm_errors", "Failed model requests, by kind.", ["kind"], registry=r
        )
        self._slack_errors = Counter(
            "opsgate_slack_api_errors",
            "Failed Slack Web API calls, by method.",
            ["method"],
            registry=r,
        )
        self._feedback = Counter(
            "opsgate_feedback",
            "Feedback votes on final answers (one per person per answer), by value.",
            ["value"],
            registry=r,
        )
        self._feedback_withdrawn = Counter(
            "opsgate_feedback_withdrawn",
            "Feedback votes taken back by a change of mind, by the value taken back.",
            ["value"],
            registry=r,
        )
        # the outbox of Slack writes and what Slack's rate limits cost.
        self._ratelimited = Counter(
            "opsgate_slack_ratelimited",
            "HTTP 429s from Slack (waited out, not failures), by method.",
            ["method"],
            registry=r,
        )
        self._dropped = Counter(
            "opsgate_slack_writes_dropped",
            "Writes to Slack given up (should stay 0), by reason.",
            ["reason"],
            registry=r,
        )
        self._outbox_depth = Gauge(
            "opsgate_outbox_depth",
            "Writes waiting in the outbox, by priority.",
            ["priority"],
            registry=r,
        )
        self._outbox_oldest = Gauge(
            "opsgate_outbox_oldest_seconds",
            "Age of the oldest write waiting in the outbox.",
            registry=r,
        )
        self._queue_depth = Gauge(
            "opsgate_queue_depth", "Runs queued, waiting for a free slot.", registry=r
        )
        self._mcp_calls = Counter(
            "opsgate_mcp_calls",
            "MCP tool calls, by server and outcome.",
            ["server", "outcome"],
            registry=r,
        )
        self._mcp_restarts = Counter(
            "opsgate_mcp_restarts",
            "MCP servers restarted after a crash, a lost connection or a hang, by server.",
            ["server"],
            registry=r,
        )
        self._audit_export_lag = Gauge(
            "opsgate_audit_export_lag_seconds",
            "Age of the oldest audit row the webhook has not acknowledged (0: caught up).",
            registry=r,
        )
        self._audit_export_failures = Counter(
            "opsgate_audit_export_failures",
            "Failed deliveries of audit rows to the webhook.",
            registry=r,
        )
        self._shadow_differences = Counter(
            "opsgate_shadow_differences",
            "Live calls the shadow policy judged otherwise, by direction and policy rule.",
            ["direction", "rule"],
            registry=r,
        )
        # Every fixed label value exists from the start, so a rate() over a family that has
        # not happened yet is 0, not "no data".
        for outcome in get_args(RunOutcome):
            self._runs.labels(outcome)
        for decision in get_args(Decision):
            self._decisions.labels(decision)
        for kind in get_args(LLMErrorKind):
            self._llm_errors.labels(kind)
        for value in get_args(FeedbackValue):
            self._feedback.labels(value)
            self._feedback_withdrawn.labels(value)
        for reason in get_args(DropReason):
            self._dropped.labels(reason)
        for priority in OUTBOX_PRIORITIES:
            self._outbox_depth.labels(priority)

    def add_tools(self, names: Iterable[str]) -> None:
        """Give these tools their own `tool` label value (others are "other")."""
        self._tools.update(name for name in names if name and name != OTHER)

    def run_finished(self, outcome: RunOutcome) -> None:
        self._runs.labels(outcome).inc()

    def decision(
        self, decision: Decision, seconds: float | None = None, *, rule: str = "default"
    ) -> None:
        """Count a card's decision; `seconds` since the card was posted feeds the histogram,
        labelled with the call's policy rule (None when unknown, e.g. a card from before an
        upgrade)."""
        self._decisions.labels(decision).inc()
        if seconds is not None:
            self._decision_seconds.labels(rule, decision).observe(max(0.0, seconds))

    def decision_since(
        self,
        decision: Decision,
        posted_at: datetime,
        *,
        now: datetime | None = None,
        rule: str = "default",
    ) -> None:
        """`decision` with the latency measured from the stored time the card was posted, so it
        holds when one replica posted the card and another took the click."""
        if posted_at.tzinfo is None:
            posted_at = posted_at.replace(tzinfo=UTC)
        end = now if now is not None else datetime.now(UTC)
        self.decision(decision, (end - posted_at).total_seconds(), rule=rule)

    def escalated(self, rule: str, step: int) -> None:
        self._escalations.labels(rule, str(step)).inc()

    def reminded(self, messages: int) -> None:
        self._reminders.inc(messages)

    def tool_finished(self, tool: str, outcome: ToolOutcome, seconds: float) -> None:
        label = tool if tool in self._tools else OTHER
        self._tool_seconds.labels(label, outcome).observe(max(0.0, seconds))

    def llm_error(self, kind: LLMErrorKind) -> None:
        self._llm_errors.labels(kind).inc()

    def feedback_given(
        self, value: FeedbackValue, *, replaces: FeedbackValue | None = None
    ) -> None:
        """A vote counted: votes standing = `opsgate_feedback_total` minus
        `opsgate_feedback_withdrawn_total`, by value."""
        self._feedback.labels(value).inc()
        if replaces is not None:
            self._feedback_withdrawn.labels(replaces).inc()

    def slack_api_error(self, method: str) -> None:
        """Count a failed Web API call; `method` is Slack's name, e.g. "chat.postMessage"."""
        label = method if _SLACK_METHOD.fullmatch(method) else OTHER
        self._slack_errors.labels(label).inc()

    def slack_ratelimited(self, method: str) -> None:
        """Slack answered 429 to `method` (the paced client waits and tries again)."""
        label = method if _SLACK_METHOD.fullmatch(method) else OTHER
        self._ratelimited.labels(label).inc()

    def slack_write_dropped(self, reason: str) -> None:
        """A write to Slack was given up: "ratelimited" (past the deadline), "store" (could
        not be stored), or "slack_error" (Slack refused it for good)."""
        self._dropped.labels(reason if reason in get_args(DropReason) else "slack_error").inc()

    def outbox_depth(self, depth: Mapping[int, int], oldest_seconds: float) -> None:
        for priority in OUTBOX_PRIORITIES:
            self._outbox_depth.labels(priority).set(depth.get(int(priority), 0))
        self._outbox_oldest.set(max(0.0, oldest_seconds))

    def add_mcp_servers(self, names: Iterable[str]) -> None:
        """Every outcome of these configured servers exists from the start (at 0)."""
        for server in names:
            self._mcp_restarts.labels(server)
            for outcome in get_args(McpCallOutcome):
                self._mcp_calls.labels(server, outcome)

    def mcp_call(self, server: str, outcome: McpCallOutcome) -> None:
        """`server` is a configured server's name (the policy file's, so the set is bounded)."""
        self._mcp_calls.labels(server, outcome).inc()

    def mcp_restart(self, server: str) -> None:
        self._mcp_restarts.labels(server).inc()

    def shadow_differs(self, direction: ShadowDirection, rule: str) -> None:
        """`rule`: a policy rule's name (`tools.<tool>.rules[<i>]`) or `none`: bounded by the
        policy files."""
        self._shadow_differences.labels(direction, rule).inc()

    def audit_export_failed(self) -> None:
        self._audit_export_failures.inc()

    def set_audit_export_lag(self, seconds: float) -> None:
        self._audit_export_lag.set(seconds)

    def set_pending_approvals(self, count: int) -> None:
        self._pending.set(count)

    def set_queue_depth(self, count: int) -> None:
        self._queue_depth.set(count)

    def render(self) -> bytes:
        """The registry in the Prometheus text format, as `/metrics` serves it."""
        return generate_latest(self.registry)


def classify_llm_error(error: BaseException) -> LLMErrorKind:
    """The `LLMErrorKind` of an exception raised by a `ChatClient` (or the HTTP layer under it)."""
    match error:
        case ProviderError(status_code=429):
            return "rate_limited"
        case ProviderError(status_code=int(code)) if code >= 500:
            return "server_error"
        case ProviderError(status_code=int()):
            return "request_error"
        case ProviderError():
            return "provider"
        case httpx.TimeoutException():
            return "timeout"
        case httpx.TransportError():
            return "connection"
        case StreamError() | ChatClientError() if error.__cause__ is not None:
            cause = classify_llm_error(error.__cause__)
            return cause if cause != OTHER else _plain(error)
        case _:
            return _plain(error)


def _plain(error: BaseException) -> LLMErrorKind:
    return "stream" if isinstance(error, StreamError) else "other"
