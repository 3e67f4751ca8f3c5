"""`/readyz` and `/metrics` for the Slack outbox: not ready when writes wait and the
sender made no progress past the threshold; the rate-limit and outbox metrics are exported."""

from __future__ import annotations

from bot.observability import Metrics
from bot.observability.health import OUTBOX_STUCK_SECONDS, outbox_check


async def test_a_stuck_outbox_is_not_ready_a_slow_one_is() -> None:
    stuck = [0.0]
    check = outbox_check(lambda: stuck[0])
    assert await check() is None
    stuck[0] = OUTBOX_STUCK_SECONDS - 1
    assert await check() is None
    stuck[0] = OUTBOX_STUCK_SECONDS + 1
    reason = await check()
    assert reason is not None and "outbox" in reason


def test_the_outbox_metrics_are_exported_from_the_start() -> None:
    metrics = Metrics()
    text = metrics.render().decode()
    assert 'opsgate_slack_writes_dropped_total{reason="ratelimited"} 0.0' in text
    assert 'opsgate_outbox_depth{priority="0"} 0.0' in text
    metrics.slack_ratelimited("chat.update")
    metrics.slack_write_dropped("channel_not_found")  # a Slack code: one bounded label
    metrics.outbox_depth({0: 3, 2: 1}, 12.5)
    text = metrics.render().decode()
    assert 'opsgate_slack_ratelimited_total{method="chat.update"} 1.0' in text
    assert 'opsgate_slack_writes_dropped_total{reason="slack_error"} 1.0' in text
    assert 'opsgate_outbox_depth{priority="0"} 3.0' in text
    assert 'opsgate_outbox_depth{priority="2"} 1.0' in text
    assert "opsgate_outbox_oldest_seconds 12.5" in text
