"""MCP tool servers for real: the demo server (tests/mcp_servers) over stdio and streamable HTTP,
and the published `mcp-server-time`, each started as a subprocess by the test."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_core import ToolError
from bot.policy import McpServerConfig
from bot.tools.mcp import (
    INHERITED,
    McpConfigError,
    McpServers,
    McpStartError,
    McpTool,
    check_servers,
)

DEMO = str(Path(__file__).parent.parent / "mcp_servers" / "demo_server.py")
CHANGING = str(Path(__file__).parent.parent / "mcp_servers" / "changing_server.py")
FAST = (0.01, 0.5)  # restart backoff for tests: the next call waits on the restart, not a clock


def demo(**values: Any) -> McpServerConfig:
    return McpServerConfig.model_validate({"command": sys.executable, "args": [DEMO], **values})


@pytest.fixture
async def servers() -> AsyncIterator[McpServers]:
    async with McpServers({"demo": demo()}, backoff=FAST) as started:
        yield started


async def test_tools_are_offered_as_server__tool_with_schema_and_annotations(
    servers: McpServers,
) -> None:
    names = [tool.name for tool in servers.tools]
    assert names[:3] == ["demo__status", "demo__delete_release", "demo__environment"]
    status = servers.tool("demo__status")
    assert status.description == "Report whether a service is up."
    assert status.parameters["properties"]["service"]["default"] == "web"
    assert status.title == "Service status" and status.server == "demo"
    assert status.annotations.labels() == ("read-only",)
    delete = servers.tool("demo__delete_release")
    assert delete.annotations.labels() == ("destructive",)
    assert delete.parameters["required"] == ["release"]


async def test_read_only_runs_freely_and_anything_else_waits(servers: McpServers) -> None:
    assert not servers.tool("demo__status").needs_approval({"service": "db"})
    assert servers.tool("demo__delete_release").needs_approval({"release": "r1"})
    assert servers.tool("demo__record").needs_approval({"note": "x"})  # not annotated


async def test_calls_map_text_structured_and_errors(servers: McpServers) -> None:
    assert await servers.tool("demo__status").invoke({"service": "db"}) == "db is up"
    inventory = await servers.tool("demo__inventory").invoke({})
    assert json.loads(inventory) == {"hosts": ["a", "b"], "count": 2}
    with pytest.raises(ToolError, match="fail"):
        await servers.tool("demo__fail").invoke({"reason": "nope"})


async def test_long_output_is_capped_head_and_tail() -> None:
    async with McpServers({"demo": demo(output_limit=100)}, backoff=FAST) as started:
        text = await started.tool("demo__shout").invoke({"size": 10_000})
    assert text.startswith("H" * 50) and text.endswith("T" * 50)
    assert "[... 9900 characters cut ...]" in text


async def test_no_secret_reaches_a_stdio_server(monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "SLACK_BOT_TOKEN": "xoxb-not-for-servers",
        "OPENAI_API_KEY": "sk-not-for-servers",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=not-for-servers",
        "PAGERDUTY_TOKEN": "pd-not-for-servers",
        "GITHUB_TOKEN": "another-servers-env-not-for-servers",
        "USER": "opsgate-not-for-servers",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPSGATE_POLICY", "/etc/opsgate/policy.toml")
    monkeypatch.setenv("DEMO_GREETING", "hello")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("TZ", "UTC")
    config = demo(env={"GREETING": "${DEMO_GREETING}", "MODE": "test"})
    other = demo(env={"TOKEN": "${GITHUB_TOKEN}"})
    async with McpServers({"demo": config, "other": other}, backoff=FAST) as started:
        seen = json.loads(await started.tool("demo__environment").invoke({}))
    assert seen["GREETING"] == "hello" and seen["MODE"] == "test" and seen["LANG"] == "C.UTF-8"
    assert seen["TZ"] == "UTC"
    # LC_CTYPE: Python's own locale coercion in the child, not something we pass.
    assert set(seen) - {"LC_CTYPE"} <= set(INHERITED) | {"GREETING", "MODE"}
    assert not any("not-for-servers" in value for value in seen.values())
    assert "OPSGATE_POLICY" not in seen and "TOKEN" not in seen


async def test_a_crash_answers_that_call_and_the_next_call_gets_a_restarted_server(
    servers: McpServers, tmp_path: Path
) -> None:
    connection = servers.connection("demo")
    assert connection.starts == 1
    with pytest.raises(ToolError, match="stopped during the call of 'crash'"):
        await asyncio.wait_for(servers.tool("demo__crash").invoke({}), 10)
    assert await servers.tool("demo__status").invoke({}) == "web is up"
    # Restarted once: the crashing call was not sent again (it would have crashed it again).
    assert connection.starts == 2


async def test_later_listings_are_handed_on_after_a_restart_and_a_change() -> None:
    """A restarted server is listed again, and so is one that says its tools changed (here on
    a `subscriptions/listen` stream); each listing reaches `relisted` as fresh tools."""
    listings: asyncio.Queue[tuple[str, tuple[McpTool, ...]]] = asyncio.Queue()

    async def relisted(server: str, tools: tuple[McpTool, ...]) -> None:
        await listings.put((server, tools))

    changing = McpServerConfig.model_validate(
        {"command": sys.executable, "args": [CHANGING], "env": {"CHANGING_SWAP_AFTER_CALL": "1"}}
    )
    configs = {"demo": demo(), "net": changing}
    async with McpServers(configs, backoff=FAST, relisted=relisted) as started:
        assert listings.empty()  # the first listing is start-up's own
        with pytest.raises(ToolError):
            await started.tool("demo__crash").invoke({})
        assert await started.tool("demo__status").invoke({}) == "web is up"
        server, tools = await asyncio.wait_for(listings.get(), 10)
        assert server == "demo" and "demo__status" in [t.name for t in tools]
        before = started.tool("net__lookup")
        assert before.annotations.read_only is False
        assert await before.invoke({"host": "db1"}) == "looked up db1"
        server, [after] = await asyncio.wait_for(listings.get(), 10)
        assert server == "net" and after.name == "net__lookup"
        assert after.annotations.read_only is True and "also_delete" in str(after.parameters)
        assert started.tool("net__lookup") is before  # what the model is offered is unchanged


async def test_each_call_is_delivered_exactly_once(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    config = demo(env={"DEMO_CALL_LOG": str(log)})
    async with McpServers({"demo": config}, backoff=FAST) as started:
        record = started.tool("demo__record")
        assert await record.invoke({"note": "first"}) == "recorded first"
        with pytest.raises(ToolError):
            await started.tool("demo__crash").invoke({})
        assert await record.invoke({"note": "second"}) == "recorded second"
    assert log.read_text().splitlines() == ["first", "second"]


async def test_a_call_that_never_answers_times_out() -> None:
    async with McpServers({"demo": demo(call_timeout="1s")}, backoff=FAST) as started:
        with pytest.raises(ToolError, match="did not answer within 1s"):
            await started.tool("demo__hang").invoke({})
        assert await started.tool("demo__status").invoke({}) == "web is up"


async def test_overrides_must_name_listed_tools() -> None:
    config = demo(tools={"delete_releases": {"approval": "always"}})
    with pytest.raises(McpConfigError, match=r"'delete_releases'.*lists: crash, delete_release"):
        async with McpServers({"demo": config}):
            pass


async def test_over_long_names_and_clashes_are_start_up_errors() -> None:
    long_name = "a" * 55
    with pytest.raises(McpConfigError, match=f"server '{long_name}' tool 'delete_release'"):
        async with McpServers({long_name: demo()}):
            pass
    with pytest.raises(McpConfigError, match="'demo__status', which another tool already is"):
        async with McpServers({"demo": demo()}, taken={"demo__status"}):
            pass


async def test_a_server_that_does_not_start_fails_start_up_naming_it() -> None:
    configs = {
        "demo": demo(),
        "gone": McpServerConfig(command="/nonexistent/mcp-server"),
    }
    with pytest.raises(McpStartError, match="'gone': command '/nonexistent/mcp-server' not found"):
        async with McpServers(configs):
            pass


@pytest.fixture
async def http_demo() -> AsyncIterator[str]:
    """The demo server over streamable HTTP on a free loopback port, requiring a token."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        DEMO,
        "--http",
        "--token",
        "t0ken",
        stdout=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        port = int(line.decode().split()[1])
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await process.wait()


async def test_streamable_http_with_a_header_from_the_environment(http_demo: str) -> None:
    config = McpServerConfig(url=http_demo, headers={"Authorization": "Bearer ${DEMO_TOKEN}"})
    async with McpServers({"web": config}, environ={"DEMO_TOKEN": "t0ken"}) as started:
        assert await started.tool("web__status").invoke({"service": "api"}) == "api is up"
        assert started.tool("web__delete_release").needs_approval({"release": "r"})


async def test_check_reports_one_line_per_server(http_demo: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    configs = {
        "demo": demo(),
        "web": McpServerConfig(url=http_demo, headers={"Authorization": "Bearer t0ken"}),
        "gone": McpServerConfig(command="/nonexistent/mcp-server"),
        "down": McpServerConfig(url=f"http://127.0.0.1:{closed_port}/mcp"),
        "broken": McpServerConfig(
            command=sys.executable,
            args=["-c", "import sys; sys.stderr.write('no config file\\n'); sys.exit(2)"],
        ),
        "mute": McpServerConfig(
            command=sys.executable, args=["-c", "import sys; sys.stdin.read()"], timeout="1s"
        ),
        "token": McpServerConfig(url=http_demo, headers={"Authorization": "${NO_SUCH_TOKEN}"}),
    }
    checks = await check_servers(configs, environ={"PATH": os.environ.get("PATH", "")})
    assert [c.kind for c in checks] == ["ok", "ok"] + ["failed"] * 5
    assert checks[0].tools[:2] == ("demo__status", "demo__delete_release")
    lines = [c.line for c in checks]
    assert len(lines) == len(configs)
    assert lines[0].startswith("MCP server 'demo': ok: 10 tools (status, delete_release, ")
    assert lines[1].startswith("MCP server 'web': ok: 10 tools (status, ")
    assert lines[2] == "MCP server 'gone': command '/nonexistent/mcp-server' not found"
    assert lines[3].startswith(f"MCP server 'down': cannot reach http://127.0.0.1:{closed_port}")
    assert lines[4].startswith("MCP server 'broken': handshake failed")
    assert lines[4].endswith("(stderr: no config file)")
    assert lines[5] == "MCP server 'mute': no handshake within 1s"
    assert "mcp_servers.token.headers.Authorization uses ${NO_SUCH_TOKEN}" in lines[6]


async def test_the_published_time_server() -> None:
    config = McpServerConfig(
        command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]
    )
    async with McpServers({"time": config}) as started:
        assert {tool.name for tool in started.tools} == {
            "time__get_current_time",
            "time__convert_time",
        }
        now = started.tool("time__get_current_time")
        assert not now.needs_approval({"timezone": "UTC"})  # annotated read-only
        answer = json.loads(await now.invoke({"timezone": "Europe/Paris"}))
        assert answer["timezone"] == "Europe/Paris"
