"""The metric families: names, bounded labels, and the text format prometheus-client parses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from agent_core.exceptions import ChatClientError, ProviderError, StreamError
from bot.observability import Metrics, classify_llm_error

FAMILIES = {
    "opsgate_runs": "counter",
    "opsgate_pending_approvals": "gauge",
    "opsgate_decisions": "counter",
    "opsgate_decision_seconds": "histogram",
    "opsgate_tool_seconds": "histogram",
    "opsgate_llm_errors": "counter",
    "opsgate_slack_api_errors": "counter",
    "opsgate_queue_depth": "gauge",
    "opsgate_mcp_calls": "counter",
    "opsgate_mcp_restarts": "counter",
    "opsgate_feedback": "counter",
    "opsgate_feedback_withdrawn": "counter",
    "opsgate_audit_export_lag_seconds": "gauge",
    "opsgate_audit_export_failures": "counter",
    "opsgate_slack_ratelimited": "counter",
    "opsgate_slack_writes_dropped": "counter",
    "opsgate_outbox_depth": "gauge",
    "opsgate_outbox_oldest_seconds": "gauge",
    "opsgate_shadow_differences": "counter",
    "opsgate_escalations": "counter",
    "opsgate_reminders": "counter",
}


def samples(metrics: Metrics) -> list[Sample]:
    text = metrics.render().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(metrics: Metrics, name: str, **labels: str) -> float:
    found = [s.value for s in samples(metrics) if s.name == name and s.labels == labels]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


def test_every_family_is_rendered_with_its_type() -> None:
    text = Metrics().render().decode()
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    # prometheus-client adds `*_created` gauges next to counters and histograms; nothing else.
    assert {k: v for k, v in families.items() if not k.endswith("_created")} == FAMILIES


def test_fixed_label_values_exist_before_anything_happens() -> None:
    metrics = Metrics()
    assert value(metrics, "opsgate_runs_total", outcome="failed") == 0
    assert value(metrics, "opsgate_decisions_total", decision="expired") == 0
    assert value(metrics, "opsgate_llm_errors_total", kind="timeout") == 0


def test_typed_methods_count_under_their_labels() -> None:
    metrics = Metrics(tools=["run_command"])
    metrics.run_finished("completed")
    metrics.run_finished("completed")
    metrics.run_finished("cancelled")
    metrics.decision("approved", 12.0)
    metrics.decision("rejected")
    metrics.llm_error("rate_limited")
    metrics.slack_api_error("chat.postMessage")
    metrics.set_pending_approvals(3)
    metrics.set_queue_depth(2)
    metrics.tool_finished("run_command", "ok", 0.2)

    assert value(metrics, "opsgate_runs_total", outcome="completed") == 2
    assert value(metrics, "opsgate_runs_total", outcome="cancelled") == 1
    assert value(metrics, "opsgate_decisions_total", decision="approved") == 1
    assert value(metrics, "opsgate_decisions_total", decision="rejected") == 1
    # Only the decision that knew its card's age is in the latency histogram.
    approved = {"rule": "default", "outcome": "approved"}
    assert value(metrics, "opsgate_decision_seconds_count", **approved) == 1
    assert value(metrics, "opsgate_decision_seconds_sum", **approved) == 12.0
    assert value(metrics, "opsgate_decision_seconds_bucket", le="15.0", **approved) == 1
    assert value(metrics, "opsgate_decision_seconds_bucket", le="5.0", **approved) == 0
    assert value(metrics, "opsgate_llm_errors_total", kind="rate_limited") == 1
    assert value(metrics, "opsgate_slack_api_errors_total", method="chat.postMessage") == 1
    assert value(metrics, "opsgate_pending_approvals") == 3
    assert value(metrics, "opsgate_queue_depth") == 2
    assert value(metrics, "opsgate_tool_seconds_count", tool="run_command", outcome="ok") == 1


def test_decision_since_measures_from_the_stored_posting_time() -> None:
    metrics = Metrics()
    posted = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    rule = "tools.run_command.rules[0]"
    metrics.decision_since("edited", posted, now=posted + timedelta(seconds=90), rule=rule)
    metrics.decision_since("allowed", posted.replace(tzinfo=None), now=posted)  # naive = UTC
    assert value(metrics, "opsgate_decision_seconds_sum", rule=rule, outcome="edited") == 90.0
    assert value(metrics, "opsgate_decision_seconds_sum", rule="default", outcome="allowed") == 0
    assert value(metrics, "opsgate_decisions_total", decision="edited") == 1
    assert value(metrics, "opsgate_decisions_total", decision="allowed") == 1


def test_tool_and_method_labels_stay_bounded() -> None:
    metrics = Metrics(tools=["get_time"])
    metrics.tool_finished("get_time", "error", 1.0)
    metrics.tool_finished("made_up_by_the_model_1", "ok", 1.0)
    metrics.tool_finished("made_up_by_the_model_2", "timeout", 1.0)
    metrics.add_tools(["time__get_current_time"])
    metrics.tool_finished("time__get_current_time", "ok", 1.0)
    metrics.slack_api_error("chat.update")
    metrics.slack_api_error("U0123 <@channel> not a method")

    tools = {s.labels["tool"] for s in samples(metrics) if s.name == "opsgate_tool_seconds_count"}
    assert tools == {"get_time", "other", "time__get_current_time"}
    methods = {
        s.labels["method"] for s in samples(metrics) if s.name == "opsgate_slack_api_errors_total"
    }
    assert methods == {"chat.update", "other"}


def test_each_metrics_object_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.run_finished("failed")
    assert value(first, "opsgate_runs_total", outcome="failed") == 1
    assert value(second, "opsgate_runs_total", outcome="failed") == 0


def _caused(error: Exception, cause: BaseException) -> Exception:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ProviderError("x", status_code=429), "rate_limited"),
        (ProviderError("x", status_code=503), "server_error"),
        (ProviderError("x", status_code=401), "request_error"),
        (ProviderError("error inside the stream"), "provider"),
        (StreamError("cut off"), "stream"),
        (_caused(ChatClientError("x"), httpx.ConnectError("refused")), "connection"),
        (_caused(ChatClientError("x"), httpx.ReadTimeout("slow")), "timeout"),
        (_caused(StreamError("x"), httpx.RemoteProtocolError("eof")), "connection"),
        (_caused(StreamError("x"), ValueError("bad")), "stream"),
        (ChatClientError("x"), "other"),
        (RuntimeError("x"), "other"),
    ],
)
def test_classify_llm_error(error: Exception, kind: str) -> None:
    assert classify_llm_error(error) == kind


def test_feedback_is_counted_by_value_from_zero() -> None:
    metrics = Metrics()
    assert value(metrics, "opsgate_feedback_total", value="bad") == 0
    metrics.feedback_given("good")
    metrics.feedback_given("good")
    metrics.feedback_given("bad")
    assert value(metrics, "opsgate_feedback_total", value="good") == 2
    assert value(metrics, "opsgate_feedback_total", value="bad") == 1
    metrics.feedback_given("bad", replaces="good")  # a change of mind takes "good" back
    assert value(metrics, "opsgate_feedback_withdrawn_total", value="good") == 1
    assert value(metrics, "opsgate_feedback_withdrawn_total", value="bad") == 0


def test_escalations_and_reminders_are_counted() -> None:
    metrics = Metrics()
    metrics.escalated("tools.run_command.rules[0]", 2)
    metrics.reminded(3)
    labels = {"rule": "tools.run_command.rules[0]", "step": "2"}
    assert value(metrics, "opsgate_escalations_total", **labels) == 1
    assert value(metrics, "opsgate_reminders_total") == 3
