"""The `opsgate` command: chat in a terminal, check, audit, and start-up errors."""

from __future__ import annotations

import asyncio
import importlib.metadata
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.cli import main
from bot.cli.chat import run_chat
from bot.cli.check import run_check
from bot.policy import Policy
from bot.settings import Settings
from bot.store import SQLiteStore
from bot.wiring import open_deps
from tests.agent_core.test_openai_client import ModelsEndpoint
from tests.scenarios.test_app import make_tools, tool_messages
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

ROOT = Path(__file__).resolve().parents[2]


def answers(*lines: str) -> Callable[[str], str]:
    """An `input()` that answers from a script, then signals end of input."""
    queue = list(lines)

    def fake_input(prompt: str) -> str:
        if not queue:
            raise EOFError
        return queue.pop(0)

    return fake_input


def settings_for(
    tmp_path: Path, llm_url: str, slack_url: str = "http://127.0.0.1:9/api/"
) -> Settings:
    return Settings(
        slack_bot_token="xoxb-test-token",
        slack_api_url=slack_url,
        openai_base_url=llm_url,
        opsgate_model="test-model",
        opsgate_db=str(tmp_path / "opsgate.db"),
        _env_file=None,
    )


async def test_chat_asks_for_approval_at_the_prompt(tmp_path: Path) -> None:
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi-terminal"})])
        llm.reply_text("The command said hi.")
        settings = settings_for(tmp_path, llm.base_url)
        out = io.StringIO()
        async with open_deps(settings, tools=make_tools(tmp_path)) as deps:
            code = await run_chat(deps=deps, input_fn=answers("say hi", "y"), out=out)
            audit = await deps.store.audit_rows()
        assert code == 0
        text = out.getvalue()
        assert "run_command wants to run" in text
        assert "hi-terminal" in text
        assert "The command said hi." in text
        [result] = tool_messages(llm.requests[1])
        assert "hi-terminal" in result["content"]
        decisions = [a for a in audit if a.event == "decision"]
        assert decisions and (decisions[0].actor or "").startswith("terminal:")


async def test_chat_rejection_reason_reaches_the_model(tmp_path: Path) -> None:
    marker = tmp_path / "nope"
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": f"touch {marker}"})])
        llm.reply_text("OK, not touching it.")
        settings = settings_for(tmp_path, llm.base_url)
        async with open_deps(settings, tools=make_tools(tmp_path)) as deps:
            await run_chat(deps=deps, input_fn=answers("touch", "not today"), out=io.StringIO())
        [result] = tool_messages(llm.requests[1])
        assert result["content"].startswith("Rejected: not today")
        assert not marker.exists()


async def test_check_says_what_is_wrong(tmp_path: Path) -> None:
    async with LLMStandIn() as llm, SlackAPIStandIn(token="xoxb-the-right-one") as slack:
        good = Settings(
            slack_bot_token="xoxb-the-right-one",
            slack_api_url=slack.url,
            openai_base_url=llm.base_url,
            opsgate_model="test-model",
            opsgate_db=str(tmp_path / "opsgate.db"),
            _env_file=None,
        )
        out = io.StringIO()
        assert await run_check(out=out, settings=good) == 0, out.getvalue()
        assert "FAIL" not in out.getvalue()
        assert f"ok   llm: {llm.base_url} is reachable" in out.getvalue()
        assert "ok   policy: no policy file; using the built-in defaults; tools: " in out.getvalue()

        bad = good.model_copy(
            update={
                "slack_bot_token": Settings(slack_bot_token="xoxb-wrong").slack_bot_token,
                "openai_base_url": "http://127.0.0.1:9/v1",
            }
        )
        out = io.StringIO()
        assert await run_check(out=out, settings=bad) == 1
        report = out.getvalue()
        assert "invalid_auth" in report and "SLACK_BOT_TOKEN" in report
        assert "cannot reach http://127.0.0.1:9/v1" in report and "OPENAI_BASE_URL" in report
        assert "xoxb-wrong" not in report

        async with ModelsEndpoint(401, {"error": {"message": "bad key"}}) as endpoint:
            refused = good.model_copy(
                update={
                    "openai_base_url": endpoint.base_url,
                    "openai_api_key": Settings(openai_api_key="sk-wrong-key").openai_api_key,
                }
            )
            out = io.StringIO()
            assert await run_check(out=out, settings=refused) == 1
        [line] = [line for line in out.getvalue().splitlines() if "llm:" in line]
        assert line.startswith("FAIL llm: ") and "refused the API key (HTTP 401): bad key" in line
        assert line.endswith("check OPENAI_API_KEY") and "sk-wrong-key" not in out.getvalue()
        assert endpoint.headers[0]["Authorization"] == "Bearer sk-wrong-key"


POLICIES = {
    "tools_modules": (
        '[defaults]\ntools_modules = ["no_such_module_for_opsgate:tool"]\n',
        "cannot load tool 'no_such_module_for_opsgate:tool'",
    ),
    "unknown_tool": (
        '[tools.no_such_tool]\napproval = "always"\n',
        "[tools.no_such_tool]: unknown tool 'no_such_tool'",
    ),
}


@pytest.mark.parametrize("case", sorted(POLICIES))
async def test_check_fails_on_a_policy_that_would_stop_start_up(tmp_path: Path, case: str) -> None:
    text, expected = POLICIES[case]
    policy = tmp_path / "opsgate.toml"
    policy.write_text(text, encoding="utf-8")
    async with LLMStandIn() as llm, SlackAPIStandIn(token="xoxb-test-token") as slack:
        settings = settings_for(tmp_path, llm.base_url, slack.url).model_copy(
            update={"opsgate_policy": policy}
        )
        out = io.StringIO()
        assert await run_check(out=out, settings=settings) == 1
    [line] = [line for line in out.getvalue().splitlines() if "policy:" in line]
    assert line.startswith("FAIL policy: ") and expected in line, line


async def test_check_loads_the_policy_tools_like_start_up(tmp_path: Path) -> None:
    policy = tmp_path / "opsgate.toml"
    policy.write_text(
        '[defaults]\ntools_modules = ["tests.support.custom_tools:restart_service"]\n\n'
        '[tools.restart_service]\napproval = "always"\n',
        encoding="utf-8",
    )
    async with LLMStandIn() as llm, SlackAPIStandIn(token="xoxb-test-token") as slack:
        settings = settings_for(tmp_path, llm.base_url, slack.url).model_copy(
            update={"opsgate_policy": policy}
        )
        out = io.StringIO()
        assert await run_check(out=out, settings=settings) == 0, out.getvalue()
    assert (
        f"ok   policy: {policy} is valid; tools: http_request, restart_service, run_command"
        in out.getvalue()
    )


async def test_check_asks_for_the_settings_of_the_chosen_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith(("SLACK_", "OPENAI_", "OPSGATE_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .env, no opsgate.toml
    async with LLMStandIn() as llm, SlackAPIStandIn(token="xoxb-test-token") as slack:
        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test-token")
        monkeypatch.setenv("SLACK_SIGNING_SECRET", "signing-secret-for-tests")
        monkeypatch.setenv("SLACK_API_URL", slack.url)
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        monkeypatch.setenv("OPSGATE_MODEL", "test-model")
        out = io.StringIO()
        assert await run_check(out=out, http=True) == 0, out.getvalue()
        assert "ok   configuration: every setting HTTP mode needs is present" in out.getvalue()

        out = io.StringIO()
        assert await run_check(out=out) == 1
        assert out.getvalue().startswith("FAIL configuration (Socket Mode): SLACK_APP_TOKEN")

        monkeypatch.delenv("SLACK_SIGNING_SECRET")
        monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-1-test")
        out = io.StringIO()
        assert await run_check(out=out) == 0, out.getvalue()
        out = io.StringIO()
        assert await run_check(out=out, http=True) == 1
        assert "SLACK_SIGNING_SECRET" in out.getvalue().splitlines()[0]


def test_check_http_on_the_command_line(tmp_path: Path) -> None:
    env = {"SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_APP_TOKEN": "xapp-1-test"}
    result = _opsgate(["check", "--http"], cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("FAIL configuration (HTTP mode): ")
    assert "SLACK_SIGNING_SECRET" in result.stdout.splitlines()[0]


OPSGATE = Path(sys.executable).with_name("opsgate")
"""The console script that `pip install` made from `[project.scripts]`: the real entry point."""


def _environment(env: dict[str, str]) -> dict[str, str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "OPSGATE_"))
    }
    base["PYTHONPATH"] = str(ROOT)
    return {**base, **env}


def _opsgate(
    args: list[str], *, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(OPSGATE), *args],
        cwd=cwd,
        env=_environment(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_run_with_a_malformed_token_stops_with_one_clear_line(tmp_path: Path) -> None:
    """(Without any token, `run` starts the local workspace: tests/workspace.)"""
    result = _opsgate(["run"], cwd=tmp_path, env={"SLACK_BOT_TOKEN": "xoxp-a-user-token"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "SLACK_BOT_TOKEN" in lines[0]


async def test_audit_prints_table_and_json_lines(tmp_path: Path) -> None:
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": "echo audited"})])
        llm.reply_text("done")
        settings = settings_for(tmp_path, llm.base_url)
        async with open_deps(settings, tools=make_tools(tmp_path)) as deps:
            await run_chat(deps=deps, input_fn=answers("audit me", "y"), out=io.StringIO())
    env = {"OPSGATE_DB": str(tmp_path / "opsgate.db")}
    as_json = _opsgate(["audit", "--json"], cwd=tmp_path, env=env)
    assert as_json.returncode == 0, as_json.stderr
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    events = [row["event"] for row in rows]
    assert events.index("request") < events.index("decision") < events.index("execution_start")
    assert "execution_end" in events
    table = _opsgate(["audit", "--since", "1h"], cwd=tmp_path, env=env)
    assert table.returncode == 0 and "decision" in table.stdout
    bad = _opsgate(["audit", "--since", "yesterday-ish"], cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "yesterday-ish" in bad.stderr


def test_version_is_the_installed_package_version(tmp_path: Path) -> None:
    expected = f"opsgate {importlib.metadata.version('opsgate')}\n"
    result = _opsgate(["--version"], cwd=tmp_path, env={})
    assert (result.returncode, result.stdout, result.stderr) == (0, expected, "")
    module = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--version"],
        cwd=tmp_path,
        env=_environment({}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert module.stdout == expected


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
async def test_audit_into_a_closed_pipe_stops_quietly(tmp_path: Path, as_json: bool) -> None:
    """`opsgate audit --json | head -1`: far more than a pipe holds, and the reader leaves."""
    db = tmp_path / "opsgate.db"
    async with SQLiteStore(db) as store:
        for n in range(400):
            await store.audit("request", actor="U0ALICE", details={"text": f"{n:04d}" * 500})
    args = [str(OPSGATE), "audit", *(["--json"] if as_json else [])]
    env = _environment({"OPSGATE_DB": str(db)})

    def head_1() -> tuple[str, int, str]:
        with subprocess.Popen(
            args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            first = proc.stdout.readline()
            proc.stdout.close()
            err = proc.stderr.read()
            return first, proc.wait(timeout=60), err

    first, code, err = await asyncio.to_thread(head_1)
    assert ('"event": "request"' in first) if as_json else first.startswith("time (UTC)")
    assert (code, err) == (0, "")


def _bad_database(kind: str, tmp_path: Path) -> Path:
    if kind == "directory":
        path = tmp_path / "a-directory"
        path.mkdir()
    else:
        path = tmp_path / "notes.txt"
        path.write_text("these are my notes, not a database\n" * 20, encoding="utf-8")
    return path


SLACK_AND_LLM = {
    "SLACK_BOT_TOKEN": "xoxb-test-token",
    "SLACK_APP_TOKEN": "xapp-1-test",
    "SLACK_API_URL": "http://127.0.0.1:9/api/",
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    "OPSGATE_MODEL": "test-model",
}
"""Everything `run` and `chat` need, pointing at a port nobody listens on."""


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], None]:
    """Set `run`'s and `chat`'s settings, with `OPSGATE_DB` as given, for an in-process `main`."""

    def set_up(db: Path) -> None:
        for name in list(os.environ):
            if name.startswith(("SLACK_", "OPENAI_", "OPSGATE_")):
                monkeypatch.delenv(name)
        monkeypatch.chdir(tmp_path)  # no .env, no opsgate.toml
        for name, value in {**SLACK_AND_LLM, "OPSGATE_DB": str(db)}.items():
            monkeypatch.setenv(name, value)

    return set_up


@pytest.mark.parametrize("kind", ["directory", "garbage"])
@pytest.mark.parametrize("command", ["run", "chat", "audit"])
def test_an_unusable_database_is_one_line_and_status_2(
    tmp_path: Path,
    environment: Callable[[Path], None],
    capsys: pytest.CaptureFixture[str],
    command: str,
    kind: str,
) -> None:
    db = _bad_database(kind, tmp_path)
    environment(db)
    assert main([command]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("opsgate: OPSGATE_DB is ") and str(db) in line
    assert ("a directory" if kind == "directory" else "not an SQLite database") in line


@pytest.mark.parametrize("kind", ["directory", "garbage"])
def test_check_reports_an_unusable_database_as_configuration(
    tmp_path: Path,
    environment: Callable[[Path], None],
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    """`check` reports it like every other configuration problem: a FAIL line, status 1."""
    db = _bad_database(kind, tmp_path)
    environment(db)
    assert main(["check"]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("FAIL configuration (Socket Mode): OPSGATE_DB is ") and str(db) in first


async def test_a_database_in_use_stops_run_and_chat_but_not_audit(tmp_path: Path) -> None:
    db = tmp_path / "opsgate.db"
    env = {**SLACK_AND_LLM, "OPSGATE_DB": str(db)}
    async with SQLiteStore(db, exclusive=True) as running_bot:
        await running_bot.audit("request", actor="U0ALICE")
        for command in ("run", "chat"):
            result = await asyncio.to_thread(_opsgate, [command], cwd=tmp_path, env=env)
            assert result.returncode == 2, result.stderr
            [line] = result.stderr.strip().splitlines()
            assert line.startswith("opsgate: another OpsGate process") and str(db) in line
        audit = await asyncio.to_thread(_opsgate, ["audit", "--json"], cwd=tmp_path, env=env)
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["actor"] == "U0ALICE"


async def test_audit_table_fits_100_columns_with_threads_and_json_arguments(
    tmp_path: Path,
) -> None:
    long_command = "echo " + "a-rather-long-argument " * 8
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": long_command})])
        llm.reply_text("done")
        settings = settings_for(tmp_path, llm.base_url)
        async with open_deps(settings, tools=make_tools(tmp_path)) as deps:
            await run_chat(deps=deps, input_fn=answers("audit me", "y"), out=io.StringIO())
    env = {"OPSGATE_DB": str(tmp_path / "opsgate.db")}
    table = _opsgate(["audit"], cwd=tmp_path, env=env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, table.stdout
    assert lines[0].split() == ["time", "(UTC)", "event", "actor", "channel/thread", "call"]
    assert lines[1].strip() == "details"
    assert "terminal/" in table.stdout  # the chat's channel and thread
    joined = " ".join(line.strip() for line in lines)
    assert '"arguments": {"command": "echo a-rather-long-argument' in joined
    assert '\\"command\\"' not in table.stdout  # not JSON inside a string


async def test_check_verifies_the_app_token_in_socket_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith(("SLACK_", "OPENAI_", "OPSGATE_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    async with LLMStandIn() as llm, SlackAPIStandIn(token="xoxb-test-token") as slack:
        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test-token")
        monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-1-revoked")
        monkeypatch.setenv("SLACK_API_URL", slack.url)
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        monkeypatch.setenv("OPSGATE_MODEL", "stand-in-model")
        out = io.StringIO()
        assert await run_check(out=out) == 0, out.getvalue()
        assert "ok   slack: the app-level token opens a Socket Mode connection" in out.getvalue()
        [call] = slack.calls_to("apps.connections.open")
        assert call.token == "xapp-1-revoked"  # the app token, not the bot token

        slack.respond_with("apps.connections.open", {"ok": False, "error": "invalid_auth"})
        out = io.StringIO()
        assert await run_check(out=out) == 1
        assert (
            "FAIL slack: apps.connections.open said 'invalid_auth'; check SLACK_APP_TOKEN"
            in out.getvalue()
        )


async def test_chat_honours_required_approvals(tmp_path: Path) -> None:
    """The terminal runs through the same run service as Slack: with two approvals required,
    the first `y` records one approval and nothing runs; the second person's `y` runs it."""
    marker = tmp_path / "ran"
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": f"echo x >> {marker}"})])
        llm.reply_text("Done, with two approvals.")
        settings = settings_for(tmp_path, llm.base_url)
        policy = Policy.from_toml("[defaults]\nrequired_approvals = 2\n")
        out = io.StringIO()
        async with open_deps(settings, tools=make_tools(tmp_path), policy=policy) as deps:
            script = answers("append", "y", "carol", "y")
            code = await run_chat(deps=deps, input_fn=script, out=out)
            audit = await deps.store.audit_rows()
    assert code == 0
    assert marker.read_text() == "x\n"  # ran once, after the second approval
    # "carol" was read as the approver's name, not as a new message: two model requests.
    assert len(llm.requests) == 2
    deciders = [a.actor for a in audit if a.event == "decision"]
    assert len(deciders) == 2 and len(set(deciders)) == 2
    assert deciders[1] == "terminal:carol"
    assert "Done, with two approvals." in out.getvalue()


async def test_check_without_slack_settings_checks_the_llm_for_chat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone trying `opsgate chat` first has no Slack app yet: `check` says so and tests the
    LLM instead of stopping at SLACK_BOT_TOKEN."""
    for name in list(os.environ):
        if name.startswith(("SLACK_", "OPENAI_", "OPSGATE_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    async with LLMStandIn() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        monkeypatch.setenv("OPSGATE_MODEL", "stand-in-model")
        monkeypatch.setenv("OPSGATE_CONTEXT_TOKENS", "8000")
        out = io.StringIO()
        assert await run_check(out=out) == 0, out.getvalue()
        report = out.getvalue()
        assert report.startswith("note SLACK_BOT_TOKEN is not set")
        assert "ok   configuration: every setting `opsgate chat` needs is present" in report
        assert f"ok   llm: {llm.base_url} is reachable" in report
        assert "ok   llm: context window 8,000 tokens (from the setting)" in report
        assert "slack:" not in report

        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test-token")  # --chat: Slack not asked
        out = io.StringIO()
        assert await run_check(out=out, chat=True) == 0, out.getvalue()
        assert "slack:" not in out.getvalue() and "note" not in out.getvalue()


async def test_check_tools_says_when_the_model_answers_in_words(tmp_path: Path) -> None:
    async with LLMStandIn() as llm:
        settings = settings_for(tmp_path, llm.base_url)
        llm.reply_tool_calls([("call_1", "report_ready", {})])
        out = io.StringIO()
        assert await run_check(out=out, settings=settings, chat=True, tools=True) == 0
        assert "ok   llm: the model answers a request for a tool with a tool call" in out.getvalue()
        assert llm.requests[-1]["tools"][0]["function"]["name"] == "report_ready"
        assert llm.requests[-1]["max_tokens"] == 64

        llm.reply_text("Sure! I am ready to help you with anything.")
        out = io.StringIO()
        assert await run_check(out=out, settings=settings, chat=True, tools=True) == 1
        [line] = [line for line in out.getvalue().splitlines() if "plain words" in line]
        assert line.startswith("FAIL llm: ") and "chat template" in line


class _Terminal(io.StringIO):
    """What `opsgate chat` writes to, claiming to be a terminal."""

    def isatty(self) -> bool:
        return True


async def test_chat_prints_the_timeline_one_line_per_change_when_not_a_terminal(
    tmp_path: Path,
) -> None:
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi-timeline"})])
        llm.reply_text("Done.")
        out = io.StringIO()
        async with open_deps(settings_for(tmp_path, llm.base_url), tools=make_tools(tmp_path)) as d:
            await run_chat(deps=d, input_fn=answers("say hi", "y"), out=out)
        lines = [line for line in out.getvalue().splitlines() if "echo hi-timeline" in line]
        tasks = [line for line in lines if line.startswith("[")]
        assert tasks[0] == "[ ] run_command echo hi-timeline: pending"
        assert "[?] run_command echo hi-timeline: waiting for approval (0 of 1)" in tasks
        assert tasks[-1].startswith("[x] run_command echo hi-timeline: done in ")
        assert "\x1b[" not in out.getvalue()


async def test_chat_redraws_a_task_line_in_place_on_a_terminal(tmp_path: Path) -> None:
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi-tty"})])
        llm.reply_text("Done.")
        out = _Terminal()
        async with open_deps(settings_for(tmp_path, llm.base_url), tools=make_tools(tmp_path)) as d:
            await run_chat(deps=d, input_fn=answers("say hi", "y"), out=out)
        text = out.getvalue()
        # The first run's line is printed once, then redrawn (cursor up, clear, back down).
        assert text.count("[ ] run_command echo hi-tty: pending\n") == 1
        assert "\x1b[2K[?] run_command echo hi-tty: waiting for approval (0 of 1)\x1b[" in text
