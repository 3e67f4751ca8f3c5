"""`[mcp_servers]` in the policy file and the policy's questions about MCP tools: the gate (with
its rule for the audit), channel lists with `NAME__*`, `check_tools`, and the card's line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core import ToolCall
from bot.policy import Policy, PolicyError
from bot.runs.cards import server_tool
from bot.runs.views import CardCall
from bot.slack.cards import card_body
from bot.tools.mcp import McpAnnotations, McpTool

POLICY = """
[mcp_servers.git]
command = "mcp-server-git"
args = ["--repository", "/srv/ops-repo"]

[mcp_servers.git.tools.git_checkout]
approval = "rules"
[[mcp_servers.git.tools.git_checkout.rules]]
argument = "branch_name"
pattern = "^(main|release/)"
name = "protected branch"

[mcp_servers.git.tools.git_log]
approval = "always"

[channels_policy.C0OPS]
tools = ["run_command", "git__*"]

[channels_policy.C0ONE]
tools = ["git__git_status"]
"""


def git_tool(policy: Policy, name: str, **hints: Any) -> McpTool:
    async def caller(tool: str, arguments: dict[str, Any]) -> str:
        raise AssertionError("the gate never calls the server")

    return McpTool(
        server="git",
        tool=name,
        description=f"{name} on the repository",
        parameters={"type": "object", "properties": {"branch_name": {"type": "string"}}},
        annotations=McpAnnotations(**hints),
        config=policy.mcp_servers["git"],
        caller=caller,
    )


def call(tool: McpTool, arguments: Any) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id="c1", name=tool.name, arguments=text)


def test_the_gate_asks_the_server_settings_and_names_the_rule() -> None:
    policy = Policy.from_toml(POLICY, source="p.toml")
    status = git_tool(policy, "git_status", read_only=True)
    commit = git_tool(policy, "git_commit", read_only=False, destructive=False)
    log = git_tool(policy, "git_log", read_only=True)
    checkout = git_tool(policy, "git_checkout", read_only=False)

    def decided(tool: McpTool, arguments: Any) -> tuple[bool, str]:
        decision = policy.decide(tool, call(tool, arguments))
        assert policy.gate(tool, call(tool, arguments)) is decision.requires_approval
        return decision.requires_approval, decision.rule

    assert decided(status, {}) == (
        False,
        "mcp_servers.git: approval = annotations (readOnlyHint)",
    )
    assert decided(commit, {})[0] is True
    assert decided(log, {}) == (True, "mcp_servers.git.tools.git_log: approval = always")
    assert decided(checkout, {"branch_name": "release/2.1"}) == (
        True,
        "mcp_servers.git.tools.git_checkout.rules[0] (protected branch)",
    )
    assert decided(checkout, {"branch_name": "feature/x"}) == (
        False,
        "mcp_servers.git.tools.git_checkout: no rule matched",
    )
    # Arguments that cannot be read are looked at by a human, even for a read-only tool.
    assert decided(status, "{not json") == (
        True,
        "mcp_servers.git: arguments unreadable, approval required",
    )
    assert policy.approval_summary(checkout) == "asks for approval for protected branch"
    assert policy.approval_summary(status) == "runs without approval"


def test_channel_lists_expand_server_wildcards_in_order() -> None:
    policy = Policy.from_toml(POLICY, source="p.toml")
    tools = {t.name: t for t in (git_tool(policy, "git_status"), git_tool(policy, "git_log"))}
    offered = policy.offered_tools("C0OPS", tools)
    assert offered is not None and [t.name for t in offered] == ["git__git_status", "git__git_log"]
    one = policy.offered_tools("C0ONE", tools)
    assert one is not None and [t.name for t in one] == ["git__git_status"]
    assert policy.offered_tools("C0ELSE", tools) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[mcp_servers.git]\ncommand = "x"\nrepository = "/srv"\n',
            "policy file p.toml: unknown key 'mcp_servers.git.repository'",
        ),
        (
            '[mcp_servers.git]\ncommand = "x"\n[mcp_servers.git.tools.t]\napproval = "rules"\n'
            '[[mcp_servers.git.tools.t.rules]]\nargument = "a"\npatern = "x"\n',
            "unknown key 'mcp_servers.git.tools.t.rules[0].patern' (did you mean 'pattern'?)",
        ),
        (
            '[mcp_servers.my__git]\ncommand = "x"\n',
            "policy file p.toml: mcp_servers.my__git: 'my__git' is not a usable MCP server name",
        ),
        (
            '[mcp_servers.git]\ncommand = "x"\n[channels_policy.C0OPS]\ntools = ["gti__*"]\n',
            "channels_policy.C0OPS.tools: 'gti__*' names MCP server 'gti', but there is no such "
            "[mcp_servers] section; configured: git",
        ),
        (
            '[mcp_servers.git]\ncommand = "x"\n[tools.git__git_log]\napproval = "never"\n',
            "[tools.git__git_log] is an MCP server's tool: configure it as "
            "[mcp_servers.git.tools.git_log]",
        ),
        (
            '[mcp_servers.git]\nurl = "http://h/mcp"\nargs = ["x"]\n',
            "mcp_servers.git: `args` and `env` are for stdio servers",
        ),
    ],
)
def test_mistakes_stop_start_up_naming_file_and_key(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.from_toml(text, source="p.toml")
    assert message in str(caught.value)


def test_check_tools_knows_server_tools_and_skips_servers_that_did_not_start() -> None:
    text = POLICY.replace('"git__git_status"', '"git__git_stats"')
    policy = Policy.from_toml(text, source="p.toml")
    with pytest.raises(PolicyError, match="unknown tool 'git__git_stats'"):
        policy.check_tools(["run_command", "git__git_status", "git__git_log"])
    policy.check_tools(["run_command"], unchecked_servers=["git"])


def test_the_card_names_server_tool_and_annotations_escaped() -> None:
    policy = Policy.from_toml(POLICY, source="p.toml")
    hostile = git_tool(
        policy, "git_reset", title="<!channel> Reset & wipe", read_only=False, destructive=True
    )
    shown = server_tool(hostile)
    assert shown is not None and shown.destructive and shown.labels == ("destructive",)
    card = CardCall(
        ledger_id="L1",
        tool=hostile.name,
        description=hostile.description,
        arguments={"repo_path": "/srv/ops-repo"},
        digest="d" * 64,
        requested_by="U0ALICE",
        server_tool=shown,
    )
    [title, *_] = card_body(card, 1000)
    text = title.to_dict()["text"]["text"]
    assert text.splitlines()[1] == (
        ":warning: *destructive* · MCP server `git`, tool `git_reset` "
        "(&lt;!channel&gt; Reset &amp; wipe)"
    )
    assert "<!channel>" not in json.dumps(title.to_dict())
    plain = git_tool(policy, "git_add", read_only=False, destructive=False, idempotent=True)
    line = server_tool(plain)
    assert line is not None and not line.destructive
    assert line.labels == ("not destructive", "idempotent")
    assert server_tool(None) is None
