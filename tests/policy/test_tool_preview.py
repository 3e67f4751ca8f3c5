"""A custom or MCP tool's `preview`: a paired read-only tool named in the policy,
called with `preview_args` filled from the call's arguments; the keys checked when the file is
read (unknown keys still stop start-up)."""

from __future__ import annotations

import io
import json
import re
import sys
from datetime import timedelta

import pytest

from agent_core import ToolCall
from bot.cli.policy import explain
from bot.policy import DEFAULT_PREVIEW_TTL, Policy, PolicyError
from bot.policy._fields import fill_preview_args
from tests.policy.test_mcp_policy import POLICY, git_tool
from tests.support.custom_tools import restart_service

SECTION = '[tools.restart_service]\npreview = "service_status"\n'


def _call(arguments: dict[str, object]) -> ToolCall:
    return ToolCall(id="1", name="restart_service", arguments=json.dumps(arguments))


def test_the_plan_names_the_tool_and_fills_its_arguments() -> None:
    policy = Policy.from_toml(
        SECTION + 'preview_args = { name = "{name}", forced = "{force}", unit = "{name}.service", '
        'lines = 20, tags = ["x", "{name}"] }\npreview_ttl = "2m"\n'
    )
    plan = policy.decide(restart_service, _call({"name": "web"})).preview
    assert plan is not None and plan.tool == "service_status" and plan.missing is None
    assert json.loads(plan.arguments or "") == {
        "name": "web",
        "forced": False,  # the schema's default, its JSON type kept
        "unit": "web.service",
        "lines": 20,
        "tags": ["x", "web"],
    }
    assert plan.ttl == timedelta(minutes=2)
    assert plan.shown().startswith("service_status {")


def test_without_preview_args_the_tool_is_called_with_none_and_a_missing_value_fails() -> None:
    plan = Policy.from_toml(SECTION).decide(restart_service, _call({"name": "web"})).preview
    assert plan is not None and plan.arguments == "{}" and plan.ttl == DEFAULT_PREVIEW_TTL
    assert fill_preview_args({"x": "{nope}"}, {"name": "web"}, {}) == (
        None,
        "no value for {nope} in this call",
    )


def test_a_call_that_runs_freely_or_is_forbidden_has_no_preview() -> None:
    policy = Policy.from_toml(
        '[tools.restart_service]\napproval = "rules"\npreview = "service_status"\n'
        '[[tools.restart_service.rules]]\nargument = "name"\npattern = "^db"\n'
    )
    assert policy.decide(restart_service, _call({"name": "web"})).preview is None
    assert policy.decide(restart_service, _call({"name": "db-1"})).preview is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SECTION + "preview_arg = {}\n", "unknown key 'tools.restart_service.preview_arg'"),
        ('[tools.restart_service]\npreview_args = { a = "b" }\n', "need a `preview`"),
        ('[tools.restart_service]\npreview_ttl = "1m"\n', "need a `preview`"),
        (SECTION + 'approval = "never"\n', 'approval = "never" posts none'),
        (SECTION + 'allow_for = "1h"\n', 'offers no "Allow for"'),
        (SECTION + 'preview_args = { a = "{b c}" }\n', "{b c} is not an argument name"),
        (SECTION + 'preview_args = { a = "{b" }\n', "unbalanced braces"),
        ('[tools.run_command]\npreview = "ls"\n', "write `preview` on a [[tools.run_command"),
        ('[tools.restart_service]\npreview = "restart_service"\n', "cannot be its own preview"),
    ],
)
def test_preview_keys_are_checked(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.from_toml(text)
    assert message in str(caught.value)


def test_an_unknown_preview_tool_stops_start_up() -> None:
    policy = Policy.from_toml(SECTION)
    with pytest.raises(PolicyError, match=re.escape("tools.restart_service.preview: unknown tool")):
        policy.check_tools(["restart_service", "run_command"])
    policy.check_tools(["restart_service", "service_status"])


def test_mcp_tool_preview_keys() -> None:
    server = f"[mcp_servers.demo]\ncommand = {json.dumps(sys.executable)}\n"
    policy = Policy.from_toml(
        server + '[mcp_servers.demo.tools.delete_release]\napproval = "always"\n'
        'preview = "status"\npreview_args = { service = "{release}" }\n'
    )
    with pytest.raises(
        PolicyError, match=re.escape("mcp_servers.demo.tools.delete_release.preview")
    ):
        policy.check_tools(["demo__delete_release"])
    policy.check_tools(["demo__delete_release", "demo__status"])
    policy.check_tools(["demo__delete_release"], unchecked_servers=["demo"])
    with pytest.raises(PolicyError, match="unknown key"):
        Policy.from_toml(
            server + '[mcp_servers.demo.tools.x]\napproval = "always"\npreview_tool = "y"\n'
        )
    with pytest.raises(PolicyError, match='approval = "never" posts none'):
        Policy.from_toml(server + '[mcp_servers.demo.tools.x]\napproval = "never"\npreview = "y"\n')


def test_help_names_the_preview_tool() -> None:
    policy = Policy.from_toml(SECTION)
    assert policy.approval_summary(restart_service) == "asks for approval (preview: service_status)"
    mcp = Policy.from_toml(
        POLICY + '[mcp_servers.git.tools.git_commit]\napproval = "always"\npreview = "git_diff"\n'
        'preview_args = { repo_path = "{repo_path}" }\n'
    )
    commit = git_tool(mcp, "git_commit", read_only=False)
    assert mcp.approval_summary(commit) == "asks for approval (preview: git_diff)"
    decision = mcp.decide(commit, ToolCall(id="1", name=commit.name, arguments="{}"))
    assert decision.preview is not None and decision.preview.tool == "git__git_diff"
    assert decision.preview.missing == "no value for {repo_path} in this call"


def test_policy_explain_names_the_preview_tool_call_it_would_make() -> None:
    policy = Policy.from_toml(
        '[defaults]\ntools_modules = ["tests.support.custom_tools:restart_service", '
        '"tests.support.custom_tools:service_status"]\n'
        + SECTION
        + 'preview_args = { name = "{name}" }\n[tools.service_status]\napproval = "never"\n'
    )
    out = io.StringIO()
    assert explain(policy, "restart_service", '{"name": "web"}', out=out) == 0
    lines = out.getvalue().splitlines()
    assert "verdict: needs 1 approval from anyone in the channel but the requester" in lines
    assert lines[-1] == (
        'preview: service_status {"name": "{name}"} -> would run: service_status '
        '{"name":"web"} (preview_ttl 10m)'
    )
    assert 'allow: the card offers no "Allow for" for this call' in lines
