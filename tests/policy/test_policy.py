"""The policy file: parsing (good and bad), gate decisions and the custom tools it names (who
may decide is tested in test_approvals.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_core import Tool, ToolCall, tool
from bot.errors import BotError
from bot.policy import Policy, PolicyError
from bot.tools import (
    ToolLoadError,
    http_gate,
    load_tool,
    load_tools,
    make_http_request,
    make_run_command,
)
from bot.words import format_duration, parse_duration

POLICIES = Path(__file__).parent.parent / "fixtures" / "policies"
KNOWN = ("run_command", "http_request", "restart_service")


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "call_1") -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=call_id, name=name, arguments=text)


@tool
def lookup(key: str) -> str:
    """A harmless tool that does not ask for approval."""
    return key


@tool(requires_approval=True)
def deploy(service: str) -> str:
    """A tool marked risky by its author."""
    return service


@pytest.fixture
def run_command(tmp_path: Path) -> Tool:
    return make_run_command(workdir=tmp_path)


@pytest.fixture
async def http_request() -> AsyncIterator[Tool]:
    async with httpx.AsyncClient() as client:
        yield make_http_request(client=client)


# --- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), (" 5M ", 300)],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "30 minutes", "m", "1.5h", "-5m", "1w"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_format_duration_round_trips() -> None:
    for text in ["90s", "15m", "2h", "1d", "1h30m", "1d2h3m4s"]:
        value = parse_duration(text)
        assert parse_duration(format_duration(value)) == value
    assert format_duration(timedelta(seconds=5400)) == "1h30m"


# --- good files --------------------------------------------------------------------------------


def test_good_file_loads_every_setting() -> None:
    policy = Policy.load(POLICIES / "good.toml", known_tools=KNOWN)

    assert policy.source == str(POLICIES / "good.toml")
    assert policy.ttl == timedelta(minutes=30)
    assert policy.remind_before == timedelta(minutes=5)
    assert policy.allow_self_approval is False
    assert policy.tools_modules == ("tests.support.custom_tools:restart_service",)
    default_spec = policy.approvers_for("C456")
    assert (default_spec.users, default_spec.groups) == (("U123",), ("S0GROUP",))
    assert default_spec.source == "defaults.approvers"
    assert policy.required_approvals_for("C456") == 1
    override = policy.approvers_for("C123")
    assert override.users == ("U999", "W777", "U888")
    assert override.groups == ()
    assert override.source == "channels_policy.C123.approvers"
    assert policy.required_approvals_for("C123") == 2
    assert policy.allows_channel("C123") and policy.allows_channel("C456")
    assert not policy.allows_channel("C999")


def test_minimal_file_keeps_safe_defaults() -> None:
    policy = Policy.load(POLICIES / "minimal.toml")
    assert policy.ttl == timedelta(minutes=15)
    assert policy.remind_before is None
    assert policy.approvers_for("C1").anyone
    assert policy.required_approvals_for("C1") == 1
    assert policy.allows_channel("CANYWHERE")
    assert policy.allow_self_approval is False


def test_default_policy(run_command: Tool) -> None:
    policy = Policy.default()
    assert policy.ttl == timedelta(hours=1)
    assert policy.required_approvals_for("C1") == 1
    assert policy.approvers_for("C1").anyone
    assert policy.allow_self_approval is False
    assert policy.gate(run_command, call("run_command", {"command": "ls"})) is True
    assert "built-in default for run_command" in policy.rule_for(
        "run_command", call("run_command", {"command": "ls"})
    )


def test_policy_is_frozen() -> None:
    policy = Policy.default()
    with pytest.raises(ValueError, match="frozen"):
        policy.defaults = policy.defaults  # type: ignore[misc]


# --- bad files ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bad_syntax.toml", ["invalid TOML", "line 3"]),
        ("unknown_key.toml", ["unknown key 'defaults.aprovers'", "did you mean 'approvers'"]),
        ("unknown_tool.toml", ["[tools.run_comand]", "unknown tool", "'run_command'"]),
        ("bad_duration.toml", ["defaults.ttl", "'30 minutes' is not a duration"]),
        ("bad_regex.toml", ["tools.run_command.rules[0].pattern", "not a valid regular"]),
        ("bad_approver.toml", ["defaults.approvers[1]", "'alice' is not a Slack user id"]),
        (
            "bad_workdir.toml",
            ["tools.run_command.workdir: '/nonexistent/opsgate-workdir' does not exist"],
        ),
    ],
)
def test_bad_file_names_file_and_problem(name: str, expected: list[str]) -> None:
    path = POLICIES / name
    with pytest.raises(PolicyError) as caught:
        Policy.load(path, known_tools=KNOWN)
    message = str(caught.value)
    assert message.startswith(f"policy file {path}: ")
    for fragment in expected:
        assert fragment in message
    assert isinstance(caught.value, BotError)


def test_unknown_tool_can_be_checked_after_loading() -> None:
    policy = Policy.load(POLICIES / "unknown_tool.toml")  # no known_tools: not checked yet
    with pytest.raises(PolicyError, match=r"unknown tool 'run_comand'.*known tools: a, b"):
        policy.check_tools(["a", "b"])


def test_missing_file() -> None:
    with pytest.raises(PolicyError, match=r"nope\.toml: not found"):
        Policy.load(POLICIES / "nope.toml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[defaults]\nttl = "10m"\nremind_before = "10m"', "must be shorter than ttl (10m)"),
        ('[defaults]\nttl = "0s"', "defaults.ttl: '0s' is zero"),
        ("[defaults]\nttl = 30", "durations are written as text"),
        ("[defaults]\nrequired_approvals = 0", "defaults.required_approvals"),
        ('[defaults]\nrequired_approvals = "2"', "defaults.required_approvals"),
        ('[defaults]\nallow_self_approval = "yes"', "defaults.allow_self_approval"),
        ('[defaults]\napprovers = ["U1X"]\nrequired_approvals = 2', "lists only 1 person"),
        ('[tools.x]\napproval = "rules"', 'approval = "rules" needs at least one'),
        ('[tools.x]\napproval = "sometimes"', "tools.x.approval"),
        (
            '[tools.x]\napproval = "never"\n[[tools.x.rules]]\nargument = "a"\npattern = "b"',
            "rules are only used with approval",
        ),
        (
            '[tools.x]\napproval = "rules"\n[[tools.x.rules]]\nargument = "a"\npatern = "b"',
            "unknown key 'tools.x.rules[0].patern' (did you mean 'pattern'?)",
        ),
        (
            '[tools.x]\napproval = "rules"\n[[tools.x.rules]]\npattern = "b"',
            "missing key 'tools.x.rules[0].argument'",
        ),
        (
            '[defaults]\nchannels = ["C1A"]\n[channels_policy.C2B]\nrequired_approvals = 2',
            "channels_policy.C2B is for a channel that defaults.channels does not list",
        ),
        ("[channels_policy.general]\nrequired_approvals = 2", "not a Slack channel id"),
        ("[defaults]\nchannels = ['#ops']", "defaults.channels[0]"),
        ("[default]\nttl = '1h'", "unknown key 'default' (did you mean 'defaults'?)"),
    ],
)
def test_bad_settings(text: str, expected: str) -> None:
    with pytest.raises(PolicyError, match=r"^policy file inline\.toml: ") as caught:
        Policy.from_toml(text, source="inline.toml")
    assert expected in str(caught.value)


def test_several_problems_are_one_error_listing_each() -> None:
    text = '[defaults]\nttl = "soon"\nrequired_approvals = 0\nextra = 1\n'
    with pytest.raises(PolicyError) as caught:
        Policy.from_toml(text, source="p.toml")
    message = str(caught.value)
    assert message.startswith("policy file p.toml: 3 problems:")
    assert "defaults.ttl" in message
    assert "defaults.required_approvals" in message
    assert "unknown key 'defaults.extra'" in message


# --- [tools.run_command] settings ---------------------------------------------------------------


def test_run_command_settings_are_read(tmp_path: Path) -> None:
    text = f'[tools.run_command]\nworkdir = "{tmp_path}"\ntimeout = "2m"\noutput_limit = 500\n'
    policy = Policy.from_toml(text, known_tools=KNOWN)
    command = policy.tools["run_command"]
    assert command.workdir == tmp_path
    assert command.timeout == timedelta(minutes=2)
    assert command.output_limit == 500
    # Setting where commands run does not relax when they need approval.
    assert policy.decide("run_command", call("run_command", {"command": "ls"})).requires_approval


def test_relative_workdir_is_from_the_starting_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ops").mkdir()
    monkeypatch.chdir(tmp_path)
    policy = Policy.from_toml('[tools.run_command]\nworkdir = "ops"\n')
    monkeypatch.chdir("/")  # kept as an absolute path: a later chdir changes nothing
    assert policy.tools["run_command"].workdir == tmp_path / "ops"


def test_run_command_settings_are_optional() -> None:
    command = Policy.from_toml('[tools.run_command]\napproval = "never"\n').tools["run_command"]
    assert (command.workdir, command.timeout, command.output_limit) == (None, None, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[tools.run_command]\nworkdir = "{tmp}/missing"',
            "tools.run_command.workdir: '{tmp}/missing' does not exist",
        ),
        (
            '[tools.run_command]\nworkdir = "{tmp}/a-file"',
            "tools.run_command.workdir: '{tmp}/a-file' is not a directory",
        ),
        ("[tools.run_command]\nworkdir = 3", "tools.run_command.workdir: a directory is a path"),
        ('[tools.run_command]\nworkdir = " "', "tools.run_command.workdir: a directory is a path"),
        ('[tools.run_command]\ntimeout = "soon"', "tools.run_command.timeout: 'soon' is not a"),
        ('[tools.run_command]\ntimeout = "0s"', "tools.run_command.timeout: '0s' is zero"),
        ("[tools.run_command]\ntimeout = 60", "tools.run_command.timeout: durations are written"),
        ("[tools.run_command]\noutput_limit = 0", "tools.run_command.output_limit: "),
        ('[tools.run_command]\noutput_limit = "100"', "tools.run_command.output_limit: "),
        (
            '[tools.run_command]\nworkdri = "/"',
            "unknown key 'tools.run_command.workdri' (did you mean 'workdir'?)",
        ),
        (
            '[tools.http_request]\nworkdir = "{tmp}/missing"',
            "unknown key 'tools.http_request.workdir': workdir, timeout, output_limit, run_as, "
            "env are settings of [tools.run_command] only",
        ),
        (
            "[tools.deploy]\noutput_limit = 10",
            "unknown key 'tools.deploy.output_limit': workdir, timeout, output_limit, run_as, "
            "env are",
        ),
    ],
)
def test_bad_run_command_settings(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(PolicyError, match=r"^policy file inline\.toml: ") as caught:
        Policy.from_toml(text.replace("{tmp}", str(tmp_path)), source="inline.toml")
    assert expected.replace("{tmp}", str(tmp_path)) in str(caught.value)


def test_other_tools_are_not_offered_run_command_keys_as_corrections() -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.from_toml('[tools.http_request]\nworkdri = "/"', source="inline.toml")
    assert "unknown key 'tools.http_request.workdri'" in str(caught.value)
    assert "did you mean" not in str(caught.value)


# --- gate decisions ----------------------------------------------------------------------------


@pytest.fixture
def good() -> Policy:
    return Policy.load(POLICIES / "good.toml", known_tools=KNOWN)


@pytest.mark.parametrize(
    ("command", "gated", "rule"),
    [
        ("rm -rf /tmp/x", True, "tools.run_command.rules[0] (command ~ /^(rm|kubectl delete|"),
        ("kubectl delete pod web-1", True, "tools.run_command.rules[0]"),
        ("systemctl restart nginx", True, "tools.run_command.rules[0]"),
        ("echo hi && sudo reboot", True, "tools.run_command.rules[1] (anything with sudo)"),
        ("ls -la", False, "tools.run_command: no rule matched"),
        ("kubectl get pods", False, "tools.run_command: no rule matched"),
    ],
)
def test_argument_rules(
    good: Policy, run_command: Tool, command: str, gated: bool, rule: str
) -> None:
    c = call("run_command", {"command": command})
    assert good.gate(run_command, c) is gated
    assert good.rule_for("run_command", c).startswith(rule)


async def test_http_rules_use_the_tools_default_method(good: Policy, http_request: Tool) -> None:
    assert good.gate(http_request, call("http_request", {"url": "http://x"})) is False
    assert (
        good.gate(http_request, call("http_request", {"url": "http://x", "method": "GET"})) is False
    )
    assert (
        good.gate(http_request, call("http_request", {"url": "http://x", "method": "HEAD"}))
        is False
    )
    assert (
        good.gate(http_request, call("http_request", {"url": "http://x", "method": "POST"})) is True
    )
    assert good.rule_for(http_request, call("http_request", {"method": "DELETE"})) == (
        "tools.http_request.rules[0] (method ~ /^(?!GET$|HEAD$)/)"
    )


async def test_built_in_http_default_agrees_with_http_gate(http_request: Tool) -> None:
    policy = Policy.default()
    for method in ["GET", "HEAD", "get", " head ", "POST", "put", "DELETE", "PATCH", "GETX", ""]:
        c = call("http_request", {"url": "http://x", "method": method})
        assert policy.gate(http_request, c) is http_gate(c), method
    no_method = call("http_request", {"url": "http://x"})
    assert policy.gate(http_request, no_method) is http_gate(no_method) is False


def test_always_and_never(good: Policy) -> None:
    restart = load_tool("tests.support.custom_tools:restart_service")
    c = call("restart_service", {"name": "web"})
    assert good.gate(restart, c) is True
    assert good.rule_for("restart_service", c) == "tools.restart_service: approval = always"
    never = Policy.from_toml('[tools.restart_service]\napproval = "never"')
    assert never.gate(restart, c) is False  # the file overrides the tool's own requires_approval


def test_unknown_tools_fall_back_to_their_own_setting(good: Policy) -> None:
    assert good.gate(lookup, call("lookup", {"key": "a"})) is False
    assert good.gate(deploy, call("deploy", {"service": "a"})) is True
    assert "the tool's own default (approval required)" in good.rule_for(
        deploy, call("deploy", {"service": "a"})
    )
    assert "approval required" in good.rule_for("deploy", call("deploy", {}))


def test_unreadable_arguments_need_approval(good: Policy, run_command: Tool) -> None:
    c = call("run_command", '{"command": "ls"')
    assert good.gate(run_command, c) is True
    assert "arguments unreadable" in good.rule_for("run_command", c)


def test_non_text_arguments_match_their_json(run_command: Tool) -> None:
    policy = Policy.from_toml(
        '[tools.run_command]\napproval = "rules"\ndefault = "never"\n'
        '[[tools.run_command.rules]]\nargument = "timeout_seconds"\npattern = "^[0-9]{3,}"'
    )
    assert policy.gate(run_command, call("run_command", {"command": "x", "timeout_seconds": 600}))
    assert not policy.gate(run_command, call("run_command", {"command": "x", "timeout_seconds": 6}))


def test_gate_plugs_into_agent_core(good: Policy, run_command: Tool) -> None:
    from agent_core import ApprovalGate

    gate: ApprovalGate = good.gate
    assert gate(run_command, call("run_command", {"command": "rm x"})) is True


# --- custom tools named by the policy ----------------------------------------------------------


async def test_custom_tool_loaded_from_the_policys_import_path() -> None:
    policy = Policy.load(POLICIES / "good.toml")
    tools = load_tools(policy.tools_modules, taken=["run_command", "http_request"])
    assert [t.name for t in tools] == ["restart_service"]
    assert tools[0].requires_approval() is True
    assert await tools[0].invoke({"name": "web"}) == "would restart web"
    assert load_tool("tests.support.custom_tools.restart_service") is tools[0]  # dotted form


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("tests.support.no_such_module:tool", "module 'tests.support.no_such_module' could not"),
        ("tests.support.custom_tools:missing", "has no attribute 'missing'"),
        ("tests.support.custom_tools:NOT_A_TOOL", "it is a int, not an agent_core tool"),
        ("tests.support.custom_tools:plain_function", "decorate the function with @tool"),
        ("agent_core:FunctionTool", "not an agent_core tool"),
        ("nomodule", "write it as 'package.module:attribute'"),
        ("pkg:", "write it as"),
    ],
)
def test_bad_tool_path_is_a_clear_error(path: str, expected: str) -> None:
    with pytest.raises(ToolLoadError) as caught:
        load_tool(path)
    assert str(caught.value).startswith(f"cannot load tool {path!r}: ")
    assert expected in str(caught.value)
    assert isinstance(caught.value, BotError)


def test_tool_module_that_crashes_on_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_tools_for_test.py").write_text("raise RuntimeError('no config')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_tools_for_test", raising=False)
    with pytest.raises(ToolLoadError, match="raised RuntimeError: no config"):
        load_tool("broken_tools_for_test:thing")


def test_tool_name_clash_is_an_error() -> None:
    with pytest.raises(ToolLoadError, match="name 'restart_service' is already used by"):
        load_tools(["tests.support.custom_tools:restart_service"], taken=["restart_service"])
