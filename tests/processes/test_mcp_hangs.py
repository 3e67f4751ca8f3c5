"""An MCP call that outlasts `call_timeout`: the request is cancelled on the server (MCP
`notifications/cancelled`), and a server that then does not answer a ping is restarted; both
are logged and counted. The demo server (tests/mcp_servers) runs as a real subprocess and tells
the test on a fifo when its `hang` tool starts and when it is cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent_core import ToolError, ToolTimeout
from bot.observability import Metrics
from bot.policy import McpServerConfig, Policy
from bot.tools.mcp import McpServers
from tests.support.harness import running_bot

DEMO = str(Path(__file__).parent.parent / "mcp_servers" / "demo_server.py")
FAST = (0.01, 0.5)  # restart backoff for tests: the next call waits on the restart, not a clock


def demo(**values: Any) -> McpServerConfig:
    return McpServerConfig.model_validate({"command": sys.executable, "args": [DEMO], **values})


@contextlib.asynccontextmanager
async def fifo_lines(path: Path) -> AsyncIterator[asyncio.StreamReader]:
    """The lines the server writes on the fifo at `path`, as they come. Opened read-write, so
    there is always a writer: no end of file before the server writes."""
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    reader = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    try:
        yield reader
    finally:
        transport.close()


async def next_event(lines: asyncio.StreamReader) -> tuple[str, int]:
    event, pid = (await asyncio.wait_for(lines.readline(), 20)).decode().split()
    return event, int(pid)


def counted(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if s.name.startswith("opsgate_mcp_") and s.name.endswith("_total")
    }


def calls(outcome: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("opsgate_mcp_calls_total", (("outcome", outcome), ("server", "demo")))


RESTARTS = ("opsgate_mcp_restarts_total", (("server", "demo"),))


async def test_a_timed_out_call_is_cancelled_on_the_server_which_keeps_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    async with fifo_lines(tmp_path / "hang.fifo") as events:
        config = demo(call_timeout="1s", env={"DEMO_HANG_EVENTS": str(tmp_path / "hang.fifo")})
        async with McpServers({"demo": config}, backoff=FAST, observer=metrics) as started:
            assert counted(metrics)[calls("timeout")] == 0  # every series exists from the start
            with (
                caplog.at_level(logging.WARNING, logger="bot.tools.mcp"),
                pytest.raises(ToolTimeout, match=r"did not answer within 1s and was cancelled$"),
            ):
                await started.tool("demo__hang").invoke({})
            event, pid = await next_event(events)
            assert event == "started"
            assert await next_event(events) == ("cancelled", pid)  # the cancellation arrived
            # It answered the ping, so it was kept: the next call works on the same server.
            assert await started.tool("demo__status").invoke({}) == "web is up"
            assert started.connection("demo").starts == 1
    samples = counted(metrics)
    assert (samples[calls("timeout")], samples[calls("ok")], samples[RESTARTS]) == (1, 1, 0)
    assert [r.getMessage() for r in caplog.records] == [
        "MCP server 'demo': 'hang' did not answer within 1s; the call is cancelled"
    ]


async def test_a_server_that_hangs_so_it_answers_no_ping_is_restarted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    async with fifo_lines(tmp_path / "hang.fifo") as events:
        config = demo(
            call_timeout="1s",
            env={"DEMO_HANG_EVENTS": str(tmp_path / "hang.fifo"), "DEMO_HANG": "freeze"},
        )
        async with McpServers({"demo": config}, backoff=FAST, observer=metrics) as started:
            with (
                caplog.at_level(logging.WARNING, logger="bot.tools.mcp"),
                pytest.raises(ToolError, match="no longer answers, so it is restarted"),
            ):
                await started.tool("demo__hang").invoke({})
            event, frozen = await next_event(events)
            assert event == "started"
            # The next call is answered by a new server process; the frozen one was stopped.
            assert await started.tool("demo__status").invoke({}) == "web is up"
            assert started.connection("demo").starts == 2
            with pytest.raises(ProcessLookupError):
                os.kill(frozen, 0)
    samples = counted(metrics)
    assert (samples[calls("timeout")], samples[calls("ok")], samples[RESTARTS]) == (1, 1, 1)
    assert [r.getMessage() for r in caplog.records] == [
        "MCP server 'demo': 'hang' did not answer within 1s; the call is cancelled",
        "MCP server 'demo': no answer to a ping within 1s after 'hang' timed out; restarting it",
    ]


async def test_a_crash_and_a_call_to_a_stopped_server_are_counted(tmp_path: Path) -> None:
    metrics = Metrics()
    async with McpServers({"demo": demo()}, backoff=FAST, observer=metrics) as started:
        with pytest.raises(ToolError, match="stopped during the call of 'crash'"):
            await started.tool("demo__crash").invoke({})
        with pytest.raises(ToolError, match="fail"):
            await started.tool("demo__fail").invoke({"reason": "nope"})
    with pytest.raises(ToolError, match="is shut down"):
        await started.tool("demo__status").invoke({})
    samples = counted(metrics)
    assert samples[calls("unavailable")] == 2  # the crash, and the call after shut-down
    assert (samples[calls("error")], samples[RESTARTS]) == (1, 1)


async def test_a_call_the_run_stops_waiting_for_is_cancelled_on_the_server(
    tmp_path: Path,
) -> None:
    metrics = Metrics()
    async with fifo_lines(tmp_path / "hang.fifo") as events:
        config = demo(env={"DEMO_HANG_EVENTS": str(tmp_path / "hang.fifo")})
        async with McpServers({"demo": config}, backoff=FAST, observer=metrics) as started:
            call = asyncio.create_task(started.tool("demo__hang").invoke({}))
            event, pid = await next_event(events)
            assert event == "started"
            call.cancel()  # e.g. "Cancel run", or the run's deadline
            with pytest.raises(asyncio.CancelledError):
                await call
            assert await next_event(events) == ("cancelled", pid)
            assert await started.tool("demo__status").invoke({}) == "web is up"
    samples = counted(metrics)
    assert (samples[calls("cancelled")], samples[calls("ok")], samples[RESTARTS]) == (1, 1, 0)


async def test_the_bots_metrics_count_its_mcp_calls(tmp_path: Path) -> None:
    """Through the real app: `/metrics` has the per-server families, counting a call the model
    made (the read-only `status` runs without approval)."""
    command, args = json.dumps(sys.executable), json.dumps(DEMO)
    policy = Policy.from_toml(
        f"[mcp_servers.demo]\ncommand = {command}\nargs = [{args}]\n", source="mcp-test.toml"
    )
    async with running_bot(tmp_path, tools=[], policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "demo__status", {"service": "db"})])
        bot.llm.reply_text("db is up.")
        await bot.mention("is db up?")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        text = (await bot.http.get(f"{bot.url}/metrics")).text
    assert 'opsgate_mcp_calls_total{outcome="ok",server="demo"} 1.0' in text
    assert 'opsgate_mcp_calls_total{outcome="timeout",server="demo"} 0.0' in text
    assert 'opsgate_mcp_restarts_total{server="demo"} 0.0' in text


async def test_over_streamable_http_a_timed_out_call_is_cancelled_too(tmp_path: Path) -> None:
    fifo = tmp_path / "hang.fifo"
    metrics = Metrics()
    async with fifo_lines(fifo) as events:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            DEMO,
            "--http",
            "--token",
            "t0ken",
            stdout=asyncio.subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", ""), "DEMO_HANG_EVENTS": str(fifo)},
        )
        assert process.stdout is not None
        try:
            port = int((await asyncio.wait_for(process.stdout.readline(), 30)).split()[1])
            config = McpServerConfig.model_validate(
                {
                    "url": f"http://127.0.0.1:{port}/mcp",
                    "headers": {"Authorization": "Bearer t0ken"},
                    "call_timeout": "1s",
                }
            )
            async with McpServers({"web": config}, backoff=FAST, observer=metrics) as started:
                with pytest.raises(
                    ToolTimeout, match=r"did not answer within 1s and was cancelled$"
                ):
                    await started.tool("web__hang").invoke({})
                event, pid = await next_event(events)
                assert event == "started"
                assert await next_event(events) == ("cancelled", pid)
                assert await started.tool("web__status").invoke({}) == "web is up"
        finally:
            process.terminate()
            await process.wait()
    assert (
        counted(metrics)[("opsgate_mcp_calls_total", (("outcome", "timeout"), ("server", "web")))]
        == 1
    )
