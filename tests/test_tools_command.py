"""`run_command`: a scrubbed environment, the working directory, exit codes, output caps, and
time limits and cancellation that take the whole process group down."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_core import ToolError
from bot.tools import dotenv_names, make_run_command, scrubbed_environment

DEADLINE = 10.0


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
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-very-secret")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "signing-very-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    monkeypatch.setenv("OPSGATE_MODEL", "gpt-secret-model")
    monkeypatch.setenv("DATABASE_PASSWORD", "hunter2-very-secret")
    monkeypatch.setenv("KEEP_ME", "visible-value")
    dotenv = tmp_path / ".env"
    dotenv.write_text("# bot settings\nexport DATABASE_PASSWORD=hunter2\nOPENAI_API_KEY = sk\n\n")
    tool = make_run_command(workdir=tmp_path, secret_names=dotenv_names(dotenv))

    result = await tool.invoke({"command": "env"})

    assert result.startswith("exit code: 0\n")
    assert "KEEP_ME=visible-value" in result
    for name in ["SLACK_", "OPENAI_", "OPSGATE_", "DATABASE_PASSWORD"]:
        assert name not in result
    assert "very-secret" not in result


async def test_given_environment_is_scrubbed_too(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "SLACK_BOT_TOKEN": "xoxb-x", "MY_TOKEN": "t", "A": "1"}
    tool = make_run_command(workdir=tmp_path, env=env, secret_names=["my_token"])
    result = await tool.invoke({"command": "env"})
    assert "A=1" in result
    assert "SLACK_BOT_TOKEN" not in result
    assert "MY_TOKEN" not in result


def test_scrubbed_environment_and_dotenv_names(tmp_path: Path) -> None:
    base = {"slack_bot_token": "x", "OPENAI_BASE_URL": "u", "HOME": "/h", "X": "1"}
    assert scrubbed_environment(base, ["X"]) == {"HOME": "/h"}
    assert dotenv_names(tmp_path / "missing.env") == frozenset()
    (tmp_path / ".env").write_text("A=1\n  # B=2\nexport C = 3\nnot a pair\nD=\n")
    assert dotenv_names(tmp_path / ".env") == frozenset({"A", "C", "D"})


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
    result = await asyncio.wait_for(
        tool.invoke({"command": "sleep 1000 & echo $!; wait", "timeout_seconds": 0.5}), DEADLINE
    )
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
    result = await asyncio.wait_for(
        tool.invoke({"command": "setsid sleep 1000 & echo $!; wait"}), DEADLINE
    )
    match = re.search(r"--- stdout ---\n(\d+)\n", result)
    assert match is not None, result
    escaped = int(match.group(1))
    _kill_if_alive(escaped)
    assert result.startswith("timed out after 0.3s")


async def test_model_cannot_raise_the_time_limit(tmp_path: Path) -> None:
    tool = make_run_command(workdir=tmp_path, timeout=0.3)
    result = await asyncio.wait_for(
        tool.invoke({"command": "sleep 1000", "timeout_seconds": 3600}), DEADLINE
    )
    assert result.startswith("timed out after 0.3s")


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
    with pytest.raises(ValueError, match="output_limit"):
        make_run_command(workdir=tmp_path, output_limit=1)
