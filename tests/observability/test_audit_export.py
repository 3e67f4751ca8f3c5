"""The audit exporter in this process, against a real local collector: failed deliveries are
counted, `/readyz` names the export after `[audit] unready_after` of them in a row (the
collector by scheme and host only, never its path), and one success clears both."""

from __future__ import annotations

import asyncio
import sqlite3
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


async def test_a_row_edited_by_hand_is_delivered_as_unreadable_and_the_rest_follow(
    tmp_path: Path,
) -> None:
    metrics = Metrics()
    async with SQLiteStore(tmp_path / "opsgate.db") as store, collector() as siem:
        for n in range(3):
            await store.audit("request", actor="U1", details={"n": n})
        conn = sqlite3.connect(store.path)
        with conn:
            conn.execute("DROP TRIGGER audit_no_update")
            conn.execute("UPDATE audit SET details = '{\"n\": ' WHERE seq = 2")
        conn.close()
        siem.down = False
        policy = AuditPolicy(webhook=siem.url, unready_after=2, retry_max=timedelta(seconds=1))
        exporter = AuditExporter(store, policy, metrics, poll=0.05)
        task = asyncio.create_task(exporter.run())
        try:
            await siem.wait_for("rows 1-3", lambda: {1, 2, 3} <= siem.seqs(), timeout=20)
            await store.audit("request", actor="U1", details={"n": 3})
            await siem.wait_for("row 4", lambda: 4 in siem.seqs(), timeout=20)
        finally:
            exporter.stop()
            await asyncio.wait_for(task, 10)
    rows = {row["seq"]: row for delivery in siem.deliveries for row in delivery}
    assert "details" in rows[2]["unreadable"] and "hash" not in rows[2]
    assert rows[3]["details"] == {"n": 2} and rows[4]["details"] == {"n": 3}
