"""`run_as`: run_command's children run as an unprivileged OS user, out of reach of the bot's files.

Switching users needs root, which CI has; the tests that switch are skipped only when not root.
"""

from __future__ import annotations

import asyncio
import io
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_core import ToolTimeout
from bot.cli.check import run_check
from bot.policy import Policy
from bot.settings import Settings
from bot.tools import RunAsError, make_run_command, resolve_run_as
from tests.processes.test_cli import SLACK_AND_LLM, _opsgate
from tests.support.harness import running_bot
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

TEST_USER = "opsgate-test-run"
SECRET = "the-bots-secret-token"

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@pytest.fixture
def unprivileged() -> pwd.struct_passwd:
    """An unprivileged OS user: `opsgate-test-run`, created if missing, else `nobody`."""
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is not None:
        subprocess.run(
            [useradd, "--system", "--no-create-home", TEST_USER], capture_output=True, check=False
        )
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        return pwd.getpwnam("nobody")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory anyone may enter (pytest's tmp_path is not), holding one file anyone may read
    and one only the bot's user may read (mode 600, like `.env` and the database)."""
    directory = Path(tempfile.mkdtemp(prefix="opsgate-run-as-"))
    try:
        directory.chmod(0o755)
        (directory / "public.txt").write_text("public words\n")
        (directory / "public.txt").chmod(0o644)
        (directory / "secret.txt").write_text(SECRET + "\n")
        (directory / "secret.txt").chmod(0o600)
        yield directory
    finally:
        shutil.rmtree(directory)


PROBE = (
    "id -u; id -G; echo HOME=$HOME; grep -E '^Cap(Eff|Prm|Amb)' /proc/self/status; "
    "cat public.txt; cat secret.txt; echo done"
)


def policy_text(user: str, workdir: Path) -> str:
    return f'[tools.run_command]\napproval = "never"\nrun_as = "{user}"\nworkdir = "{workdir}"\n'


@as_root
async def test_a_command_runs_as_run_as_and_cannot_read_the_bots_files(
    tmp_path: Path, unprivileged: pwd.struct_passwd, shared_dir: Path
) -> None:
    policy = Policy.from_toml(policy_text(unprivileged.pw_name, shared_dir))
    async with running_bot(tmp_path, policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": PROBE})])
        bot.llm.reply_text("Checked.")
        await bot.mention("who are you?")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [answer] = [m for m in bot.llm.requests[1]["messages"] if m["role"] == "tool"]
    output = answer["content"]
    stdout = output.split("--- stdout ---\n")[1].split("--- stderr ---")[0].strip().splitlines()
    assert stdout[:3] == [
        str(unprivileged.pw_uid),
        str(unprivileged.pw_gid),  # its primary group only: the bot's groups were dropped
        f"HOME={unprivileged.pw_dir}",
    ]
    assert sorted(line.split()[1] for line in stdout[3:6]) == ["0" * 16] * 3  # no capabilities
    assert "public words" in stdout and stdout[-1] == "done"
    assert "secret.txt: Permission denied" in output
    assert SECRET not in output


@as_root
async def test_the_bots_own_user_does_read_the_file_without_run_as(shared_dir: Path) -> None:
    """The control: as the bot's user the same probe reads the secret."""
    run_command = make_run_command(workdir=shared_dir, timeout=20)
    output = await run_command.invoke({"command": PROBE})
    assert output.split("--- stdout ---\n")[1].startswith("0\n")
    assert SECRET in output


@as_root
async def test_run_as_still_stops_a_command_that_runs_too_long(
    unprivileged: pwd.struct_passwd, shared_dir: Path
) -> None:
    """The bot kills the child's process group though it belongs to another user."""
    run_command = make_run_command(
        workdir=shared_dir, timeout=1, run_as=resolve_run_as(unprivileged.pw_name)
    )
    with pytest.raises(ToolTimeout, match=r"^timed out after 1s; the process group was killed"):
        await asyncio.wait_for(run_command.invoke({"command": "sleep 30 & wait"}), 20)


def test_an_unknown_run_as_user_stops_start_up_with_one_line_naming_it(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text("no-such-user-here", tmp_path))
    env = {**SLACK_AND_LLM, "OPSGATE_DB": str(tmp_path / "o.db"), "OPSGATE_POLICY": str(policy)}
    result = _opsgate(["run"], cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("opsgate:")]
    assert "run_as" in line and "'no-such-user-here'" in line
    with pytest.raises(RunAsError, match="no OS user 'no-such-user-here'"):
        resolve_run_as("no-such-user-here")


def test_run_as_is_a_setting_of_run_command_only() -> None:
    with pytest.raises(Exception, match="run_as"):
        Policy.from_toml('[tools.http_request]\nrun_as = "nobody"\n')


async def check_lines(tmp_path: Path, policy: str | None) -> list[str]:
    path = None
    if policy is not None:
        path = tmp_path / "policy.toml"
        path.write_text(policy)
    async with LLMStandIn() as llm, SlackAPIStandIn(token="xoxb-t") as slack:
        settings = Settings(
            slack_bot_token="xoxb-t",
            slack_api_url=slack.url,
            openai_base_url=llm.base_url,
            opsgate_model="test-model",
            opsgate_db=str(tmp_path / "data" / "opsgate.db"),
            opsgate_policy=path,
            _env_file=None,
        )
        out = io.StringIO()
        assert await run_check(out=out, settings=settings) == 0, out.getvalue()
    return [line for line in out.getvalue().splitlines() if line.startswith("warn")]


@as_root
async def test_check_warns_once_for_each_way_commands_reach_the_bots_files(
    tmp_path: Path,
    unprivileged: pwd.struct_passwd,
    shared_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.chdir(tmp_path)
    me = pwd.getpwuid(os.geteuid()).pw_name
    # No policy: commands run as the bot (root here) in the bot's working directory.
    [own_user, workdir] = await check_lines(tmp_path, None)
    assert own_user.startswith(f"warn run_command: commands run as the bot's own user '{me}'")
    assert workdir.startswith(f"warn run_command: workdir '{tmp_path}' is the bot's working")
    # run_as root, in the database's directory: two warnings (as root, and the directory).
    lines = await check_lines(tmp_path, policy_text("root", data))
    assert len(lines) == 3  # root is also the bot's own user here
    assert any(line.startswith("warn run_command: commands run as root ('root')") for line in lines)
    assert any(f"workdir '{data}' is the directory of the bot's database" in line for line in lines)
    # The recommended deployment: an unprivileged user in a directory of its own.
    assert await check_lines(tmp_path, policy_text(unprivileged.pw_name, shared_dir)) == []


@as_root
async def test_a_preview_runs_as_run_as_too(
    tmp_path: Path, unprivileged: pwd.struct_passwd, shared_dir: Path
) -> None:
    """a rule's preview runs before the card as `run_as`, in `workdir`, unapproved:
    it cannot read what the bot's user alone may."""
    policy = Policy.from_toml(
        f'[tools.run_command]\napproval = "rules"\nrun_as = "{unprivileged.pw_name}"\n'
        f'workdir = "{shared_dir}"\n'
        '[[tools.run_command.rules]]\nprefix = ["cp"]\npreview = "cat {operands}"\n'
    )
    async with running_bot(tmp_path, policy=policy) as bot:
        command = "cp public.txt secret.txt"
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": command})])
        await bot.mention("copy it")
        await bot.wait_cards(1)
        row = (await bot.deps.store.pending_approvals())[0].call
    stored = row.preview_run()
    assert stored is not None and stored.argv == ("cat", "public.txt", "secret.txt")
    assert "public words" in stored.output and "Permission denied" in stored.output
    assert SECRET not in stored.output and stored.failed == "exit status 1"
