"""The `[mcp_servers]` settings, the per-call approval decision and the result text, without a
server: the pieces the policy loader and the approval gate use."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import mcp_types as types
import pytest
from pydantic import ValidationError

from agent_core import Tool
from bot.policy import McpServerConfig, McpServerName, mcp_approval, selects
from bot.tools.mcp import (
    INHERITED,
    McpAnnotations,
    McpConfigError,
    McpTool,
    expand_variables,
    server_environment,
)
from bot.tools.mcp_tool import cap, result_text


def config(**values: Any) -> McpServerConfig:
    return McpServerConfig.model_validate(values)


def test_stdio_and_http_shapes_and_defaults() -> None:
    stdio = config(command="mcp-server-git", args=["--repository", "/srv/repo"], env={"A": "1"})
    assert stdio.transport == "stdio" and stdio.args == ("--repository", "/srv/repo")
    assert stdio.approval == "annotations"
    assert stdio.timeout == timedelta(seconds=30) and stdio.call_timeout == timedelta(seconds=60)
    http = config(
        url="https://mcp.example.com/mcp",
        headers={"Authorization": "Bearer ${T}"},
        timeout="10s",
        call_timeout="2m",
    )
    assert http.transport == "http"
    assert http.call_timeout == timedelta(minutes=2)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"command": "x", "url": "http://h/mcp"}, "either `command`"),
        ({}, "either `command`"),
        ({"url": "http://h/mcp", "env": {"A": "1"}}, "for stdio servers"),
        ({"command": "x", "headers": {"A": "1"}}, "for streamable-HTTP servers"),
        ({"command": "x", "comand": "y"}, "Extra inputs are not permitted"),
        ({"command": "x", "approval": "sometimes"}, "approval"),
        ({"command": "x", "timeout": 30}, "durations are written as text"),
        ({"command": "x", "call_timeout": "0s"}, "is zero"),
        ({"url": "ftp://h/mcp"}, "url"),
        ({"command": "x", "tools": {"t": {"approval": "rules"}}}, "needs at least one"),
        (
            {
                "command": "x",
                "tools": {
                    "t": {"approval": "always", "rules": [{"argument": "a", "pattern": "b"}]}
                },
            },
            'only used with approval = "rules"',
        ),
        ({"command": "x", "tools": {"t": {}}}, "say when this tool waits"),
        (
            {
                "command": "x",
                "tools": {"t": {"approval": "rules", "rules": [{"argument": "a", "pattern": "("}]}},
            },
            "not a valid regular expression",
        ),
    ],
)
def test_a_bad_setting_is_refused_with_its_key(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        config(**values)
    assert message in str(caught.value)


def test_server_names_cannot_make_ambiguous_tool_names() -> None:
    from pydantic import TypeAdapter

    names = TypeAdapter(McpServerName)
    assert names.validate_python("git-prod_2") == "git-prod_2"
    for bad in ("git__prod", "_git", "git_", "git prod", ""):
        with pytest.raises(ValidationError, match="not a usable MCP server name"):
            names.validate_python(bad)


def test_variables_expand_and_a_missing_one_is_named_without_values() -> None:
    environ = {"GRAFANA_TOKEN": "s3cret"}
    assert expand_variables(
        {"Authorization": "Bearer ${GRAFANA_TOKEN}"}, environ, where="mcp_servers.g.headers"
    ) == {"Authorization": "Bearer s3cret"}
    with pytest.raises(McpConfigError) as caught:
        expand_variables(
            {"X-Key": "${MISSING_KEY}", "Y": "${GRAFANA_TOKEN}"},
            environ,
            where="mcp_servers.g.headers",
        )
    assert "mcp_servers.g.headers.X-Key" in str(caught.value)
    assert "MISSING_KEY" in str(caught.value) and "s3cret" not in str(caught.value)


def test_server_environment_is_its_env_plus_the_basics_only() -> None:
    parent = {
        "PATH": "/usr/bin",
        "HOME": "/home/ops",
        "LANG": "C.UTF-8",
        "LC_TIME": "C",
        "TZ": "UTC",
        "USER": "ops",
        "SLACK_BOT_TOKEN": "xoxb-secret",
        "OPENAI_API_KEY": "sk-secret",
        "OPSGATE_POLICY": "p",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=secret",
        "PAGERDUTY_TOKEN": "pd-secret",
        "GITHUB_TOKEN": "another server's env",
        "TERM": "() { :; }",
    }
    env = server_environment({"GIT_DIR": "/srv/repo", "PATH": "/opt/bin"}, parent)
    assert env == {
        "HOME": "/home/ops",
        "LANG": "C.UTF-8",
        "LC_TIME": "C",
        "TZ": "UTC",
        "GIT_DIR": "/srv/repo",
        "PATH": "/opt/bin",
    }
    assert set(INHERITED) == {"PATH", "HOME", "LANG", "TZ", "TERM"}


async def _never(tool: str, arguments: dict[str, Any]) -> str:
    raise AssertionError("a decision must not call the server")


def make_tool(annotations: McpAnnotations, **server: Any) -> McpTool:
    return McpTool(
        server="k8s",
        tool="scale",
        description=None,
        parameters={
            "type": "object",
            "properties": {"namespace": {"type": "string", "default": "prod"}},
        },
        annotations=annotations,
        config=config(command="x", **server),
        caller=_never,
    )


def test_an_mcp_tool_is_an_agent_core_tool() -> None:
    tool = make_tool(McpAnnotations(title="Scale a deployment"))
    assert isinstance(tool, Tool)
    assert tool.name == "k8s__scale" and tool.description == "Scale a deployment"
    assert tool.title == "Scale a deployment"


@pytest.mark.parametrize(
    ("annotations", "server", "arguments", "required", "rule"),
    [
        (McpAnnotations(read_only=True), {}, {}, False, "annotations (readOnlyHint)"),
        (McpAnnotations(), {}, {}, True, "not annotated read-only"),
        (McpAnnotations(read_only=False, destructive=False), {}, {}, True, "annotations"),
        (McpAnnotations(read_only=True), {"approval": "always"}, {}, True, "approval = always"),
        (McpAnnotations(destructive=True), {"approval": "never"}, {}, False, "approval = never"),
        (
            McpAnnotations(read_only=True),
            {"tools": {"scale": {"approval": "always"}}},
            {},
            True,
            "k8s.tools.scale: approval",
        ),
        (
            McpAnnotations(),
            {"approval": "always", "tools": {"scale": {"approval": "never"}}},
            {},
            False,
            "approval = never",
        ),
        (
            McpAnnotations(),
            {
                "tools": {
                    "scale": {
                        "approval": "rules",
                        "rules": [
                            {"argument": "namespace", "pattern": "^prod", "name": "production"}
                        ],
                    }
                }
            },
            {},
            True,
            "rules[0] (production)",
        ),
        (
            McpAnnotations(),
            {
                "tools": {
                    "scale": {
                        "approval": "rules",
                        "rules": [{"argument": "namespace", "pattern": "^prod"}],
                    }
                }
            },
            {"namespace": "staging"},
            False,
            "no rule matched",
        ),
    ],
)
def test_approval_is_decided_per_call(
    annotations: McpAnnotations,
    server: dict[str, Any],
    arguments: dict[str, Any],
    required: bool,
    rule: str,
) -> None:
    tool = make_tool(annotations, **server)
    decision = mcp_approval(tool, arguments)
    assert decision.required is required and tool.needs_approval(arguments) is required
    assert rule in decision.rule


def test_annotation_labels_for_the_card() -> None:
    assert McpAnnotations(read_only=True).labels() == ("read-only",)
    assert McpAnnotations(destructive=True, open_world=True).labels() == (
        "destructive",
        "open world",
    )
    assert McpAnnotations().labels() == ("may be destructive (not annotated)",)
    assert McpAnnotations().may_destroy and not McpAnnotations(destructive=False).may_destroy


def test_channel_entries_select_one_tool_or_a_whole_server() -> None:
    assert selects("git__*", "git__status") and selects("git__status", "git__status")
    assert not selects("git__*", "gitlab__status") and not selects("git__*", "git__")
    assert not selects("git__status", "git__log")


def test_results_text_structured_and_cap() -> None:
    structured = types.CallToolResult(
        content=[types.TextContent(text="2 hosts")], structured_content={"hosts": ["a", "b"]}
    )
    assert result_text(structured, 1000) == '2 hosts\n{"hosts": ["a", "b"]}'
    echoed = types.CallToolResult(
        content=[types.TextContent(text='{"hosts": ["a"]}')], structured_content={"hosts": ["a"]}
    )
    assert result_text(echoed, 1000) == '{"hosts": ["a"]}'
    image = types.CallToolResult(content=[types.ImageContent(data="AAAA", mime_type="image/png")])
    assert result_text(image, 1000) == "[image content (image/png) not shown]"
    assert cap("H" * 10 + "T" * 10, 8) == "HHHH\n[... 12 characters cut ...]\nTTTT"
    assert cap("short", 8) == "short"
