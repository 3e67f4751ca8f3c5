"""`run_command`'s shell: bash by its path, checked when the tool is built, handed the judged
text itself; and its children's allowlisted environment (real subprocesses)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_core import ToolCall
from bot.cli.check import _check_policy
from bot.policy import Policy, PolicyError
from bot.settings import Settings
from bot.tools import (
    BASH,
    ShellMissing,
    ToolEnvironmentError,
    checked_shell,
    default_tools,
    make_run_command,
)

TRICKY = [
    'printf %s "$BASH_EXECUTION_STRING"  # \'single\' "double" \\ back é\t tab  ',
    'printf %s "$BASH_EXECUTION_STRING" \\\n  # a continuation, then a comment',
    'printf %s "$BASH_EXECUTION_STRING"; : \'a;b\' "$(true)" `true` x\\ y',
    'printf %s "$BASH_EXECUTION_STRING"\n\n# trailing newlines kept\n\n',
]


def _stdout(report: str) -> str:
    head, _, rest = report.partition("\n--- stdout ---\n")
    assert head == "exit code: 0", report
    return rest.rpartition("\n--- stderr ---\n")[0]


async def test_commands_run_under_bash(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path)
    report = await tool.invoke({"command": '[[ -n "$BASH_VERSION" ]] && printf bash'})
    assert _stdout(report) == "bash"
    assert "bash -c" in tool.description


@pytest.mark.parametrize("command", TRICKY)
async def test_the_text_run_is_the_text_judged(tmp_path: Path, command: str) -> None:
    """Bash itself says which text it was given to run: the judged command, byte for byte."""
    policy = Policy.from_toml('[tools.run_command]\napproval = "never"\n')
    tool = make_run_command(workdir=tmp_path)
    call = ToolCall(id="c1", name="run_command", arguments=json.dumps({"command": command}))
    assert policy.decide(tool, call).requires_approval is False
    report = await tool.invoke(call.parsed_arguments())  # as the tool loop runs it
    assert _stdout(report) == command


async def test_the_shell_gets_the_text_as_one_argument(tmp_path: Path) -> None:
    """A stand-in shell records its argv: `-c` and the text, nothing rebuilt or re-quoted."""
    record = tmp_path / "argv"
    shell = tmp_path / "fake-bash"
    shell.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$RECORD"\n')
    shell.chmod(0o755)
    command = "kubectl rollout restart deploy/web  'a  b' \"c\"\\\n#;rm y"
    tool = make_run_command(workdir=tmp_path, shell=shell, env={"RECORD": str(record)})
    await tool.invoke({"command": command})
    assert record.read_bytes() == b"-c\0" + command.encode() + b"\0"


def test_a_missing_shell_stops_the_tool_being_built_naming_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-bash"
    with pytest.raises(ShellMissing, match=str(missing)):
        make_run_command(workdir=tmp_path, shell=missing)
    not_executable = tmp_path / "bash"
    not_executable.write_text("")
    with pytest.raises(ShellMissing, match="install bash"):
        checked_shell(not_executable)
    assert checked_shell() == BASH == Path("/bin/bash")


async def test_start_up_builds_run_command_with_its_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPS_CONTEXT", "prod")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=otel-secret")
    policy = Policy.from_toml(
        f'[tools.run_command]\nworkdir = "{tmp_path}"\n'
        '[tools.run_command.env]\nKUBE_CONTEXT = "${OPS_CONTEXT}"\n'
    )
    async with httpx.AsyncClient() as http:
        [command, _] = default_tools(http, policy)
        report = await command.invoke({"command": "env"})
        assert "KUBE_CONTEXT=prod" in report and "otel-secret" not in report
        monkeypatch.delenv("OPS_CONTEXT")
        with pytest.raises(ToolEnvironmentError, match=r"tools\.run_command\.env\.KUBE_CONTEXT"):
            default_tools(http, policy)


def test_env_is_a_setting_of_run_command_only() -> None:
    with pytest.raises(PolicyError, match=r"tools\.http_request\.env"):
        Policy.from_toml('[tools.http_request]\napproval = "never"\nenv = { A = "1" }\n')


SECRETS = {
    "SLACK_BOT_TOKEN": "xoxb-must-not-leak",
    "OPENAI_API_KEY": "sk-must-not-leak",
    "OPSGATE_AUDIT_KEY": "audit-must-not-leak",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=must-not-leak",
    "PAGERDUTY_TOKEN": "pd-must-not-leak",
    "GITHUB_TOKEN": "mcp-env-must-not-leak",
    "AWS_SECRET_ACCESS_KEY": "aws-must-not-leak",
}


async def test_printenv_shows_none_of_the_bots_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("TERM", "dumb")
    tool = make_run_command(workdir=tmp_path, env={"KUBECONFIG": "/etc/kube"})
    shown = _stdout(await tool.invoke({"command": "printenv"}))
    names = {line.split("=", 1)[0] for line in shown.splitlines() if "=" in line}
    assert "must-not-leak" not in shown
    # bash adds PWD, SHLVL and `_` of its own; nothing else is there but the allowlist.
    assert names - {"PWD", "SHLVL", "_", "OLDPWD"} == {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TZ",
        "TERM",
        "KUBECONFIG",
    } - ({"HOME"} if "HOME" not in os.environ else set())


async def test_opsgate_check_names_a_missing_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "bin" / "bash"
    monkeypatch.setattr("bot.tools.command.BASH", missing)
    no_env_file: dict[str, Any] = {"_env_file": None}
    settings = Settings(opsgate_db=tmp_path / "opsgate.db", **no_env_file)
    lines: list[tuple[bool, str]] = []
    assert await _check_policy(settings, lambda ok, line: lines.append((ok, line))) is None
    [(ok, line)] = lines
    assert not ok and line.startswith("policy: run_command runs commands with")
    assert repr(str(missing)) in line and "install bash" in line
