"""Allowance shapes (`bot.allowances`): what an "Allow for" may cover, and the holes it must not.

Each hole of the old program-and-subcommand shape has a test of its own: an option's value
passing for the subcommand (`git --namespace status ...`, `systemctl -p status ...`) and later
words being free (`rm -f /srv/app/a /etc/passwd`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core import ToolCall
from bot.allowances import (
    ArgvShape,
    ExactShape,
    covers,
    dump_shape,
    examples_for,
    load_shape,
    offered_shapes,
    shape_of,
)
from bot.policy import GateDecision, Policy

ALWAYS = Policy.from_toml('[tools.run_command]\napproval = "always"\nallow_for = "1h"\n')
KUBECTL = Policy.from_toml(
    '[tools.run_command]\napproval = "rules"\nallow_for = "1h"\n'
    '[[tools.run_command.rules]]\nprefix = ["kubectl", "get"]\nallow_prefix = ["kubectl", "get"]\n'
    '[[tools.run_command.rules]]\nprefix = ["kubectl", "delete"]\n'
    '[[tools.run_command.rules]]\nprefix = ["kubectl", "delete"]\npattern = "secret"\n'
    'approvers = ["U0A", "U0B"]\nrequired_approvals = 2\n'
    '[[tools.run_command.rules]]\nprefix = ["kubectl", "delete", "namespace"]\n'
    'approval = "forbidden"\n'
)


def decision(policy: Policy, command: str) -> GateDecision:
    call = ToolCall(id="c", name="run_command", arguments=json.dumps({"command": command}))
    return policy.decide("run_command", call)


def args(command: str) -> dict[str, Any]:
    return {"command": command}


def granted(policy: Policy, command: str, *, prefix: bool = False) -> ArgvShape:
    """The shape a granter picks on the card of `command`: the exact argv, or the longest
    prefix offered."""
    shapes = offered_shapes("run_command", args(command), decision(policy, command))
    chosen = next(s for s in shapes if isinstance(s, ArgvShape) and s.prefix == prefix)
    assert isinstance(chosen, ArgvShape)
    return chosen


def covered(policy: Policy, shape: ArgvShape, command: str) -> bool:
    return covers(shape, "run_command", args(command), decision(policy, command))


def test_hole_an_option_value_does_not_pass_for_git_status() -> None:
    shape = granted(ALWAYS, "git status")
    assert shape.argv == ("git", "status")
    assert not covered(ALWAYS, shape, "git --namespace status reset --hard HEAD~1")
    # And the call itself offers no prefix: `status` there may be --namespace's value.
    shapes = offered_shapes("run_command", args("git --namespace status"), None)
    assert shapes == (ArgvShape(("git", "--namespace", "status")),)


def test_hole_an_option_value_does_not_pass_for_systemctl_status() -> None:
    for prefix in (False, True):
        shape = granted(ALWAYS, "systemctl status nginx", prefix=prefix)
        assert not covered(ALWAYS, shape, "systemctl -p status restart nginx"), prefix
    assert covered(
        ALWAYS,
        granted(ALWAYS, "systemctl status nginx", prefix=True),
        "systemctl status nginx --no-pager",
    )


def test_hole_later_words_are_not_free_under_the_exact_argv() -> None:
    shape = granted(ALWAYS, "rm /srv/app/a")
    assert shape == shape_of("run_command", args("rm /srv/app/a"), decision(ALWAYS, "rm x"))
    assert not covered(ALWAYS, shape, "rm -f /srv/app/a /etc/passwd")
    assert not covered(ALWAYS, shape, "rm /srv/app/a /etc/passwd")
    assert covered(ALWAYS, shape, "rm '/srv/app/a'")  # the same argv, quoted


def test_a_token_prefix_covers_more_words_but_never_a_compound_command() -> None:
    shape = granted(KUBECTL, "kubectl get pods", prefix=True)
    assert shape.argv == ("kubectl", "get")  # the rule's allow_prefix
    assert covered(KUBECTL, shape, "kubectl get pods -n a")
    for command in (
        "kubectl get pods; rm x",
        "kubectl get pods > /tmp/x",
        "kubectl get pods $(rm x)",
        "kubectl get pods | sh",
        "timeout 5 kubectl get pods",
        "kubectl get $X",
        "kubectl -n a get pods",
    ):
        assert not covered(KUBECTL, shape, command), command


def test_no_allowance_for_a_stricter_rule_a_forbidden_call_or_two_approvals() -> None:
    shape = ArgvShape(("kubectl", "delete"), True, "tools.run_command.rules[1]")
    assert covered(KUBECTL, shape, "kubectl delete pod web")
    assert not covered(KUBECTL, shape, "kubectl delete secret db")  # rules[2]: two approvals
    assert not covered(KUBECTL, shape, "kubectl delete namespace web")  # forbidden
    assert (
        offered_shapes(
            "run_command",
            args("kubectl delete namespace web"),
            decision(KUBECTL, "kubectl delete namespace web"),
        )
        == ()
    )
    two = decision(KUBECTL, "kubectl delete secret db")
    assert KUBECTL.allow_window("run_command", "C0OPS", two) is None


@pytest.mark.parametrize(
    "command",
    ["echo a; echo b", "echo a > f", "echo $(id)", "sudo ls", "ls | wc -l", "echo 'x", "X=1 ls"],
)
def test_calls_no_allowance_may_cover_offer_no_shape(command: str) -> None:
    assert offered_shapes("run_command", args(command), decision(ALWAYS, command)) == ()


def test_prefixes_offered_stop_at_the_first_option() -> None:
    shapes = offered_shapes("run_command", args("kubectl get pods -n a"), None)
    assert [(s.argv, s.prefix) for s in shapes if isinstance(s, ArgvShape)] == [
        (("kubectl", "get", "pods", "-n", "a"), False),
        (("kubectl", "get", "pods"), True),
        (("kubectl", "get"), True),
    ]


@pytest.mark.parametrize(
    "command", ["kubectl get pods -n a", "systemctl status nginx", "git status", "ls"]
)
def test_generated_examples_are_what_the_shape_covers_and_does_not(command: str) -> None:
    for shape in offered_shapes("run_command", args(command), decision(ALWAYS, command)):
        assert isinstance(shape, ArgvShape)
        matching, not_matching = examples_for(shape)
        assert len(matching) == len(not_matching) == 3
        for example in matching:
            assert covered(ALWAYS, shape, example), (shape, example)
        for example in not_matching:
            assert not covered(ALWAYS, shape, example), (shape, example)


def test_other_tools_allow_their_exact_arguments() -> None:
    [shape] = offered_shapes("restart_service", {"name": "web"}, None)
    assert isinstance(shape, ExactShape)
    assert shape.matches({"name": "web"}) and not shape.matches({"name": "db"})


def test_shapes_round_trip_and_old_ones_load_strictly() -> None:
    shape = ArgvShape(("kubectl", "get"), True, "tools.run_command.rules[0]")
    assert load_shape(dump_shape(shape)) == shape
    old = load_shape(json.dumps({"kind": "command", "program": "git", "subcommand": "status"}))
    assert old == ArgvShape(("git", "status"), True, None)
    assert old is not None and not old.matches(args("git --namespace status reset --hard x"))
    assert load_shape('{"kind": "command", "program": "git", "subcommand": null}') is None
    assert load_shape("not json") is None
