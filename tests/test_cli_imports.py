"""What the CLI imports: `opsgate --help` none of the bot's layers, and each command only what
it uses (`opsgate check` talks to Slack's Web API, but never loads Bolt or the Slack front end).
Each case runs in a fresh interpreter, since this one has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(
        m for m in modules if m.split(".")[0] == "slack_bolt" or m.startswith("bot.slack")
    )


def test_opsgate_help_imports_no_command() -> None:
    code = (
        "from bot.cli._main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    modules = _modules_after(code)
    assert _heavy(modules) == []
    assert not {"bot.policy", "bot.store", "bot.server", "bot.wiring"} & modules


@pytest.mark.parametrize("command", ["check", "audit", "report", "migrate"])
def test_a_commands_help_imports_no_bolt(command: str) -> None:
    code = (
        "from bot.cli._main import main\n"
        f"try:\n    main([{command!r}, '--help'])\nexcept SystemExit:\n    pass"
    )
    assert _heavy(_modules_after(code)) == []


def test_the_check_command_imports_neither_bolt_nor_the_slack_front_end() -> None:
    assert _heavy(_modules_after("import bot.cli.check")) == []
