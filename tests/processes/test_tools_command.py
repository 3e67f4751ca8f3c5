"""`run_command`: an allowlisted environment, the working directory, exit codes, output caps, and
time limits and cancellation that take the whole process group down; its settings from the policy
file; and the bot's own environment kept out of reach through /proc."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from agent_core import ToolError, ToolTimeout
from bot.settings import Settings
from bot.tools import make_run_command, protect_process_environment
from bot.wiring import open_deps

DEADLINE = 10.0
KELVIN = "\u212a"
"""KELVIN SIGN: lower-cases to an ASCII "k", but does not upper-case to "K"."""


async def wait_until_gone(pid: int) -> None:
    """Wait for `pid` to end (a zombie counts): a pidfd becomes readable when it does.

    Event-driven, not a sleep loop; bounded by DEADLINE.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    loop.add_reader(fd, ended.set)
    try:
        await asyncio.wait_for(ended.wait(), DEADLINE)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _kill_if_alive(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def pid_reports(tmp_path: Path) -> AsyncIterator[tuple[str, asyncio.Future[int]]]:
    """A Unix socket the command reports its background child's pid to; yields the shell
    snippet that sends `$!` and a future that resolves to the pid."""
    loop = asyncio.get_running_loop()
    reported: asyncio.Future[int] = loop.create_future()

    async def receive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()
        if not reported.done():
            reported.set_result(int(data))
        writer.close()
        await writer.wait_closed()

    path = tmp_path / "pid.sock"
    server = await asyncio.start_unix_server(receive, path=str(path))
    sender = (
        f"{shlex.quote(sys.executable)} -c "
        "'import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
        f"s.sendall(sys.argv[2].encode()); s.close()' {shlex.quote(str(path))} $!"
    )
    try:
        yield sender, reported
    finally:
        server.close()
        await server.wait_closed()


async def test_tool_shape(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path, timeout=30)
    assert tool.name == "run_command"
    assert tool.requires_approval() is True
    assert tool.parameters["required"] == ["command"]
    assert set(tool.parameters["properties"]) == {"command", "timeout_seconds"}
    assert "30 seconds" in tool.description


async def test_secrets_absent_from_the_child_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-very-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    monkeypatch.setenv("OPSGATE_MODEL", "gpt-secret-model")
    monkeypatch.setenv("DATABASE_PASSWORD", "hunter2-very-secret")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("TZ", "UTC")
    tool = make_run_command(workdir=tmp_path)

    result = await tool.invoke({"command": "env"})

    assert result.startswith("exit code: 0\n")
    assert "LC_TIME=C" in result and "TZ=UTC" in result and "PATH=" in result
    for name in ["SLACK_", "OPENAI_", "OPSGATE_", "DATABASE_PASSWORD"]:
        assert name not in result
    assert "very-secret" not in result


async def test_the_tools_own_env_is_added(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_KUBECONFIG", "/etc/kube/config")
    env = {"KUBECONFIG": "${OPS_KUBECONFIG}", "MODE": "ops"}
    tool = make_run_command(workdir=tmp_path, env=env)
    result = await tool.invoke({"command": "env"})
    assert "KUBECONFIG=/etc/kube/config" in result and "MODE=ops" in result
    assert "OPS_KUBECONFIG" not in result  # named in a value, not passed on itself


async def test_secrets_in_any_letter_case_absent_from_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pydantic-settings reads the environment without regard to case, so each of these names
    gives the bot a setting; none may reach the command."""
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv(f"SLAC{KELVIN}_BOT_TOKEN", "xoxb-kelvin-cased-token")
    monkeypatch.setenv("openai_api_key", "sk-lower-cased-key")
    no_env_file: dict[str, Any] = {"_env_file": None}
    settings = Settings(**no_env_file)
    assert settings.slack_bot_token.get_secret_value() == "xoxb-kelvin-cased-token"
    assert settings.openai_api_key.get_secret_value() == "sk-lower-cased-key"

    # The shell drops names that are not shell identifiers from what it exports, but they are
    # still in its own environment: read that.
    command = "env; tr '\\0' '\\n' < /proc/$$/environ"
    result = await make_run_command(workdir=tmp_path).invoke({"command": command})

    assert result.startswith("exit code: 0\n")
    assert "PATH=" in result
    assert "-cased-" not in result


async def test_exit_code_stdout_stderr_and_workdir(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path)
    result = await tool.invoke({"command": "pwd; echo oops >&2; exit 7"})
    assert result == (f"exit code: 7\n--- stdout ---\n{tmp_path}\n\n--- stderr ---\noops\n")


async def test_killed_by_a_signal_is_reported(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path)
    result = await tool.invoke({"command": "kill -TERM $$"})
    assert result.startswith("killed by signal 15\n")


async def test_output_truncated_with_a_note_of_how_much(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path, output_limit=100)
    command = (
        "head -c 5000 /dev/zero | tr '\\0' a; printf END; head -c 300 /dev/zero | tr '\\0' b >&2"
    )
    result = await tool.invoke({"command": command})

    stdout = result.split("--- stdout ---\n", 1)[1].split("\n--- stderr ---\n", 1)[0]
    stderr = result.split("\n--- stderr ---\n", 1)[1]
    assert stdout == "a" * 50 + "\n[... 4903 characters cut ...]\n" + "a" * 47 + "END"
    assert stderr == "b" * 50 + "\n[... 200 characters cut ...]\n" + "b" * 50


async def test_multibyte_output_is_counted_in_characters(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path, output_limit=10)
    result = await tool.invoke({"command": "printf 'ééééééééééééééééééééé'"})  # 21 characters
    assert "ééééé\n[... 11 characters cut ...]\nééééé" in result


async def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path, timeout=30)
    with pytest.raises(ToolTimeout) as raised:
        await asyncio.wait_for(
            tool.invoke({"command": "sleep 1000 & echo $!; wait", "timeout_seconds": 0.5}),
            DEADLINE,
        )
    result = str(raised.value)
    assert raised.value.seconds == 0.5
    assert result.startswith("timed out after 0.5s; the process group was killed\n")
    match = re.search(r"--- stdout ---\n(\d+)\n", result)
    assert match is not None, result
    grandchild = int(match.group(1))
    try:
        await wait_until_gone(grandchild)
        assert not _alive(grandchild)
    finally:
        _kill_if_alive(grandchild)


async def test_a_process_that_left_the_group_does_not_hang_the_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`setsid` puts the child out of reach of killpg while it still holds our pipes: the tool
    stops reading after the grace period instead of waiting for it."""
    monkeypatch.setattr("bot.tools.command._GRACE_SECONDS", 0.2)
    tool = make_run_command(workdir=tmp_path, timeout=0.3)
    with pytest.raises(ToolTimeout) as raised:
        await asyncio.wait_for(
            tool.invoke({"command": "setsid sleep 1000 & echo $!; wait"}), DEADLINE
        )
    result = str(raised.value)
    match = re.search(r"--- stdout ---\n(\d+)\n", result)
    assert match is not None, result
    escaped = int(match.group(1))
    _kill_if_alive(escaped)
    assert result.startswith("timed out after 0.3s")


async def test_model_cannot_raise_the_time_limit(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path, timeout=0.3)
    with pytest.raises(ToolTimeout, match=r"^timed out after 0\.3s"):
        await asyncio.wait_for(
            tool.invoke({"command": "sleep 1000", "timeout_seconds": 3600}), DEADLINE
        )


async def test_cancellation_kills_the_process_group(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path, timeout=600)
    async with pid_reports(tmp_path) as (send_pid, reported):
        task = asyncio.create_task(tool.invoke({"command": f"sleep 1000 & {send_pid}; wait"}))
        grandchild = await asyncio.wait_for(reported, DEADLINE)
    try:
        assert _alive(grandchild)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, DEADLINE)
        await wait_until_gone(grandchild)
        assert not _alive(grandchild)
    finally:
        _kill_if_alive(grandchild)


async def test_missing_workdir_is_reported(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path / "nope")
    with pytest.raises(ToolError, match=r"working directory .*nope' does not exist"):
        await tool.invoke({"command": "true"})


async def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path)
    with pytest.raises(ToolError, match="timeout_seconds"):
        await tool.invoke({"command": "true", "timeout_seconds": -1})
    with pytest.raises(ToolError, match="command"):
        await tool.invoke({})


def test_bad_configuration(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="timeout must be positive"):
        make_run_command(workdir=tmp_path, timeout=0)
    with pytest.raises(ValueError, match="output_limit must be at least 1"):
        make_run_command(workdir=tmp_path, output_limit=0)


async def test_output_limit_of_one_keeps_the_first_character(tmp_path: Path) -> None:
    result = await make_run_command(workdir=tmp_path, output_limit=1).invoke({"command": "echo ab"})
    assert "--- stdout ---\na\n[... 2 characters cut ...]\n\n--- stderr ---" in result


# --- settings from the policy file ---------------------------------------------------------------


def _settings(tmp_path: Path, policy: Path | None) -> Settings:
    # pydantic's dataclass_transform hides BaseSettings' own `_env_file` keyword from mypy.
    no_env_file: dict[str, Any] = {"_env_file": None}
    return Settings(
        slack_bot_token=SecretStr("xoxb-test-token"),
        openai_base_url="http://127.0.0.1:9/v1",
        opsgate_model="test-model",
        opsgate_db=tmp_path / "opsgate.db",
        opsgate_policy=policy,
        **no_env_file,
    )


async def test_open_deps_sets_run_command_up_from_the_policy(tmp_path: Path) -> None:
    workdir = tmp_path / "ops work"
    workdir.mkdir()
    policy = tmp_path / "opsgate.toml"
    policy.write_text(
        f'[tools.run_command]\nworkdir = "{workdir}"\ntimeout = "2m"\noutput_limit = 1000\n'
    )
    async with open_deps(_settings(tmp_path, policy)) as deps:
        tool = deps.tools["run_command"]
        where = await tool.invoke({"command": "pwd"})
        long = await tool.invoke({"command": "head -c 3000 /dev/zero | tr '\\0' a"})
    assert where == f"exit code: 0\n--- stdout ---\n{workdir}\n\n--- stderr ---\n"
    assert "stopped after 120 seconds at most" in tool.description
    assert "[... 2000 characters cut ...]" in long


async def test_open_deps_without_settings_runs_commands_where_the_bot_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_deps(_settings(tmp_path, None)) as deps:
        tool = deps.tools["run_command"]
        where = await tool.invoke({"command": "pwd"})
        long = await tool.invoke({"command": "head -c 30000 /dev/zero | tr '\\0' a"})
    assert f"--- stdout ---\n{tmp_path}\n" in where
    assert "stopped after 60 seconds at most" in tool.description
    assert "[... 10000 characters cut ...]" in long


# --- the bot's own environment ------------------------------------------------------------------

PROC_SECRET = "xoxb-read-through-proc"

_READ_OWN_ENVIRON = """
import asyncio, ctypes, os, sys
from pathlib import Path
from bot.tools import make_run_command, protect_process_environment
tool = make_run_command(workdir=Path("/"))
asyncio.run(tool.invoke({"command": "true"}))  # lazy imports done while files are readable
if os.geteuid() == 0:
    # Root reads every process (CAP_SYS_PTRACE): become an ordinary user, as the bot should
    # run. Changing uid clears the dumpable flag; set it back to what a process started by
    # that user has (an unprivileged process may set 1).
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    assert ctypes.CDLL(None).prctl(4, 1, 0, 0, 0) == 0
if sys.argv[1] == "protect":
    assert protect_process_environment() is True
# The tool's child (bash, then cat) reads this Python process's environment.
print(asyncio.run(tool.invoke({"command": f"cat /proc/{os.getpid()}/environ"})))
"""


def _run_stand_in(mode: str) -> subprocess.CompletedProcess[str]:
    """A stand-in for the bot with a token in its environment, running `run_command`."""
    env = {"PATH": os.environ["PATH"], "SLACK_BOT_TOKEN": PROC_SECRET}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [sys.executable, "-c", _READ_OWN_ENVIRON, mode],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=DEADLINE * 3,
        check=False,
    )


@pytest.mark.skipif(sys.platform != "linux", reason="prctl and /proc are Linux's")
def test_a_command_cannot_read_the_bots_environment_through_proc() -> None:
    exposed = _run_stand_in("exposed")
    if exposed.returncode != 0 and os.geteuid() == 0 and "setres" in exposed.stderr:
        pytest.skip(
            "running as root without the right to become user nobody, and root reads any "
            f"process's environ: {exposed.stderr.strip().splitlines()[-1:]}"
        )
    assert exposed.returncode == 0, exposed.stderr
    assert PROC_SECRET in exposed.stdout  # the leak this guards against is real here

    protected = _run_stand_in("protect")

    assert protected.returncode == 0, protected.stderr
    assert PROC_SECRET not in protected.stdout
    assert "Permission denied" in protected.stdout


@pytest.mark.skipif(sys.platform != "linux", reason="prctl is Linux's")
def test_protect_process_environment_clears_the_dumpable_flag() -> None:
    script = (
        "import ctypes\n"
        "from bot.tools import protect_process_environment\n"
        "prctl = ctypes.CDLL(None).prctl\n"
        "before = prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE\n"
        "done = protect_process_environment()\n"
        "print(before, done, prctl(3, 0, 0, 0, 0))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE * 3
    )
    assert result.stdout.split() == ["1", "True", "0"], result.stderr


def test_protect_process_environment_is_a_no_op_off_linux(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("bot.tools.command.sys.platform", "darwin")
    assert protect_process_environment() is False
