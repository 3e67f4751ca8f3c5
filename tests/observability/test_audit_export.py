"""The audit exporter in this process, against a real local collector: failed deliveries are
counted, `/readyz` names the export after `[audit] unready_after` of them in a row (the
collector by scheme and host only, never its path), and one success clears both."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bot.observability import Metrics
from bot.observability.audit_export import AuditExporter
from bot.policy import AuditPolicy
from bot.store import SQLiteStore
from tests.processes.test_audit_export import collector


def failures(metrics: Metrics) -> float:
    text = metrics.render().decode()
    [value] = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "opsgate_audit_export_failures_total"
    ]
    return value


async def test_failures_are_counted_and_make_the_export_unready_until_a_delivery(
    tmp_path: Path,
) -> None:
    metrics = Metrics()
    async with SQLiteStore(tmp_path / "opsgate.db") as store, collector() as siem:
        await store.audit("request", actor="U1", details={"n": 1})
        policy = AuditPolicy(webhook=siem.url, unready_after=2, retry_max=timedelta(seconds=1))
        exporter = AuditExporter(store, policy, metrics, poll=0.05)
        ready = exporter.readiness()
        assert await ready() is None
        task = asyncio.create_task(exporter.run())
        try:
            # The exporter is sequential: a third request means it took in the second failure.
            await siem.wait_for("third refusal", lambda: siem.refused >= 3, timeout=20)
            assert failures(metrics) >= 2
            reason = await ready()
            assert reason is not None and "failed in a row (HTTP 503)" in reason, reason
            host = siem.url.rsplit("/", 1)[0]
            assert host in reason and "/ingest" not in reason
            async with siem.changed:
                siem.down = False
            await siem.wait_for("row 1", lambda: 1 in siem.seqs(), timeout=20)
            # Row 2 goes out only once the exporter took in row 1's success.
            await store.audit("request", actor="U1", details={"n": 2})
            await siem.wait_for("row 2", lambda: 2 in siem.seqs(), timeout=20)
            assert exporter.failures == 0
            assert await ready() is None
        finally:
            exporter.stop()
            await asyncio.wait_for(task, 10)
