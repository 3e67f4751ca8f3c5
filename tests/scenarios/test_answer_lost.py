"""A run whose final answer Slack never took is counted `answer_lost`: the end of
the streamed answer is refused (the stream's stop, then the outbox's redraw of the message
with the whole answer), so `opsgate_runs_total{outcome="answer_lost"}` counts it. (The run was
counted completed when its ending was stored: the answer was then whole in the database.)"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bot.observability import Metrics
from tests.support.harness import running_bot

REST = "and the rest of the answer, which only the stream's end carries"


def _runs(metrics: Metrics) -> dict[str, float]:
    text = metrics.render().decode()
    return {
        s.labels["outcome"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "opsgate_runs_total"
    }


async def test_a_run_whose_answer_slack_refused_is_counted_answer_lost(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        # The first piece starts the stream; the rest waits for the stream's end.
        bot.llm.reply_text(f"Checked: {REST}")
        bot.slack.fail_next("chat.stopStream", error="internal_error")
        for method in ("chat.update", "chat.postMessage"):
            bot.slack.fail_next(
                method, error="channel_not_found", where=lambda p: REST in str(p.get("text"))
            )
        await bot.mention("check the hosts")
        await bot.settle()
        assert not any(REST in str(m.get("text")) for m in bot.slack.messages)
        runs = _runs(bot.metrics)
        assert runs["answer_lost"] == 1


async def test_a_run_whose_answer_arrived_is_counted_completed(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        bot.llm.reply_text(f"Checked: {REST}")
        await bot.mention("check the hosts")
        await bot.settle()
        assert any(REST in str(m.get("text")) for m in bot.slack.messages)
        runs = _runs(bot.metrics)
        assert (runs["completed"], runs["answer_lost"]) == (1, 0)
