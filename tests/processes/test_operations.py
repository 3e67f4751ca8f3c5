"""The bot as operators see it: `/metrics`, `/readyz` and the JSON logs of a running bot, after
an approval flow, in HTTP mode (the harness) and in Socket Mode (`opsgate run` as a process)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from agent_core import Tool
from bot.tools import make_run_command
from tests.support.harness import CHANNEL, running_bot
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import app_mention, block_actions
from tests.support.socket_mode import SocketModeStandIn

BOB = "U0BOB"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(text: str) -> Samples:
    """Parsed with prometheus-client's own parser: what Prometheus would read."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def after_approval(samples: Samples) -> None:
    """What one approved `run_command` run leaves in the metrics."""
    assert samples[("opsgate_runs_total", (("outcome", "completed"),))] == 1
    assert samples[("opsgate_runs_total", (("outcome", "failed"),))] == 0
    assert samples[("opsgate_decisions_total", (("decision", "approved"),))] == 1
    labels = (("outcome", "approved"), ("rule", "default"))
    assert samples[("opsgate_decision_seconds_count", labels)] == 1
    key = ("opsgate_tool_seconds_count", (("outcome", "ok"), ("tool", "run_command")))
    assert samples[key] == 1
    assert samples[("opsgate_pending_approvals", ())] == 0
    assert samples[("opsgate_queue_depth", ())] == 0
    # Bounded labels: no user, channel or thread id anywhere.
    labels = {value for _, pairs in samples for _, value in pairs}
    assert not {BOB, "U0ALICE", CHANNEL} & labels


def tools(tmp_path: Path) -> list[Tool]:
    return [make_run_command(workdir=tmp_path, timeout=20)]


async def test_http_mode_metrics_and_readiness_after_an_approval(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo ok"})])
        bot.llm.reply_text("Done.")
        await bot.mention("run echo")
        [card] = await bot.wait_cards(1)
        waiting = scrape((await bot.http.get(f"{bot.url}/metrics")).text)
        assert waiting[("opsgate_pending_approvals", ())] == 1
        assert waiting[("opsgate_runs_total", (("outcome", "completed"),))] == 0  # paused

        assert (await bot.click("opsgate_approve", card["ledger_id"], user=BOB)).is_success
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        response = await bot.http.get(f"{bot.url}/metrics")
        assert response.headers["content-type"].startswith("text/plain")
        after_approval(scrape(response.text))

        ready = await bot.http.get(f"{bot.url}/readyz")
        assert (ready.status_code, ready.json()) == (200, {"ready": True})

        # Another connection holds the write lock: the database no longer accepts writes.
        blocker = sqlite3.connect(tmp_path / "opsgate.db", timeout=0)
        try:
            blocker.execute("BEGIN EXCLUSIVE")
            ready = await bot.http.get(f"{bot.url}/readyz")
        finally:
            blocker.rollback()
            blocker.close()
        assert ready.status_code == 503
        [reason] = ready.json()["reasons"]
        assert ready.json()["ready"] is False and reason.startswith("database: ")
        assert not bot.deps.write_health.writable  # what the inbox reports, too
        assert (await bot.http.get(f"{bot.url}/healthz")).json() == {"ok": True}
        # Lock released: once the store's connection has finished waiting, ready again.
        await bot.deps.store.probe_write()
        assert (await bot.http.get(f"{bot.url}/readyz")).status_code == 200
        assert bot.deps.write_health.writable


async def test_slack_api_errors_and_llm_errors_are_counted(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=tools(tmp_path)) as bot:
        bot.llm.reply_status(400)
        bot.slack.fail_next("reactions.add", error="internal_error")
        await bot.mention("hello")
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        samples = scrape((await bot.http.get(f"{bot.url}/metrics")).text)
        assert samples[("opsgate_slack_api_errors_total", (("method", "reactions.add"),))] == 1
        assert samples[("opsgate_llm_errors_total", (("kind", "request_error"),))] == 1
        assert samples[("opsgate_runs_total", (("outcome", "failed"),))] == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


OPSGATE = Path(sys.executable).with_name("opsgate")
CHECKOUT = Path(__file__).resolve().parents[2]


class _Process:
    """`opsgate run` in Socket Mode; its stderr read line by line as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            async with self._changed:
                self.lines.append(raw.decode())
                self._changed.notify_all()

    async def wait_line(self, needle: str, timeout: float = 30) -> None:
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: any(needle in line for line in self.lines))
        except TimeoutError:
            raise AssertionError(f"no log line with {needle!r}:\n{''.join(self.lines)}") from None

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 30)
        await self.reader
        return code


async def test_socket_mode_serves_metrics_and_writes_json_logs(tmp_path: Path) -> None:
    port = _free_port()
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack, SocketModeStandIn(slack) as sock:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(CHECKOUT),  # this checkout's code, not the installed one
            "HOME": str(tmp_path),
            "SLACK_BOT_TOKEN": "xoxb-test-token",
            "SLACK_APP_TOKEN": "xapp-1-A0TEST-secret",
            "SLACK_API_URL": slack.url,
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "sk-test-key-123",
            "OPSGATE_MODEL": "test-model",
            "OPSGATE_DB": str(tmp_path / "opsgate.db"),
            "OPSGATE_PORT": str(port),
            "OPSGATE_LOG_FORMAT": "json",
        }
        proc = _Process(
            await asyncio.create_subprocess_exec(
                str(OPSGATE),
                "run",
                cwd=tmp_path,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
        )
        try:
            await proc.wait_line("connected to Slack (Socket Mode)")
            await sock.wait_connected()
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(timeout=10) as http:
                ready = await http.get(f"{base}/readyz")
                assert (ready.status_code, ready.json()) == (200, {"ready": True})
                assert (await http.post(f"{base}/slack/events")).status_code in (404, 405)

                llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi"})])
                llm.reply_text("Done.")
                mention = app_mention(
                    "<@UBOT> run echo",
                    channel=CHANNEL,
                    user="U0ALICE",
                    ts="1700000001.000100",
                    event_id="Ev0SOCKET1",
                )
                await sock.send("events_api", mention)
                [posted] = await slack.wait_for(
                    "chat.postMessage", where=lambda c: bool(c.params.get("blocks")), timeout=30
                )
                ledger_id = _approve_value(posted.params["blocks"])
                click = block_actions(
                    "opsgate_approve",
                    ledger_id,
                    user=BOB,
                    channel=CHANNEL,
                    message_ts=str(posted.response["ts"]),
                )
                await sock.send("interactive", click)
                await llm.wait_for_requests(2, timeout=30)
                await proc.wait_line('"run.finished"')
                after_approval(scrape((await http.get(f"{base}/metrics")).text))
        finally:
            code = await proc.stop()
    assert code == 0, "".join(proc.lines)
    _check_json_logs(proc.lines)


def _approve_value(blocks: list[dict[str, Any]]) -> str:
    for block in blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == "opsgate_approve":
                return str(element["value"])
    raise AssertionError(f"no Approve button in {blocks!r}")


def _check_json_logs(lines: list[str]) -> None:
    """Every stderr line is one JSON object; the run's events carry its ids; no secrets."""
    records = [json.loads(line) for line in lines]
    assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    text = "".join(lines)
    for secret in ("xoxb-test-token", "xapp-1-A0TEST-secret", "sk-test-key-123"):
        assert secret not in text
    assert not any(r["logger"].startswith(("httpx", "httpcore")) for r in records)
    events = {r["event"]: r for r in records if "event" in r}
    assert {"decision", "tool.executed", "run.finished"} <= set(events)
    tool = events["tool.executed"]
    assert (tool["tool"], tool["outcome"], tool["call"]) == ("run_command", "ok", "call_1")
    assert tool["session"] and tool["thread"] == "1700000001.000100"
    assert events["decision"]["decision"] == "approved" and events["decision"]["call"] == "call_1"
    finished = [r for r in records if r.get("event") == "run.finished"]
    assert [r["outcome"] for r in finished] == ["completed"]
    assert all(r["session"] == tool["session"] for r in finished)
