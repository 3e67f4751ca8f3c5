"""An allowance covers only a fully understood plain command: what the parser reads and what
the shell runs must be the same single command."""

from __future__ import annotations

import json

import pytest

from agent_core import ToolCall
from bot.allowances import ArgvShape, covers, offered_shapes
from bot.policy import GateDecision, Policy

POLICY = Policy.from_toml(
    '[tools.run_command]\napproval = "rules"\nallow_for = "1h"\n'
    '[[tools.run_command.rules]]\nprefix = ["kubectl", "rollout", "restart"]\n'
    'allow_prefix = ["kubectl", "rollout", "restart"]\n'
)
GRANTED = ArgvShape(("kubectl", "rollout", "restart"), True, "tools.run_command.rules[0]")


def decision(command: str) -> GateDecision:
    call = ToolCall(id="c", name="run_command", arguments=json.dumps({"command": command}))
    return POLICY.decide("run_command", call)


def covered(command: str) -> bool:
    args = {"command": command}
    return covers(GRANTED, "run_command", args, decision(command))


def test_the_granted_shape_is_the_rules_prefix() -> None:
    command = "kubectl rollout restart deploy/web"
    shapes = offered_shapes("run_command", {"command": command}, decision(command))
    assert GRANTED in shapes
    assert covered(command)
    assert covered("kubectl rollout restart deploy/web \\\n  -n web")


@pytest.mark.parametrize(
    "command",
    [
        "kubectl rollout restart deploy/web\\\n#;rm y",
        "kubectl rollout restart deploy/w\\\neb",
        "kubectl rollout restart deploy/web*",
        "setsid kubectl rollout restart deploy/web",
    ],
)
def test_a_command_the_parser_may_misread_is_never_covered(command: str) -> None:
    assert not covered(command), command
    assert offered_shapes("run_command", {"command": command}, decision(command)) == ()


@pytest.mark.parametrize(
    "command",
    [
        "kubectl rollout restart deploy/web > /etc/motd",
        "kubectl rollout restart deploy/web;; rm y",
        "kubectl rollout restart deploy/web <<EOF\n`rm y`\nEOF\n",
        "env A=1 kubectl rollout restart deploy/web",
    ],
)
def test_what_was_never_covered_still_is_not(command: str) -> None:
    test_a_command_the_parser_may_misread_is_never_covered(command)
