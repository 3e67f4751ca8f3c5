"""The policy keys of "when nobody answers": reminders, the escalation ladder, on-call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent_core import ToolCall
from bot.policy import (
    NOBODY_ON_CALL,
    Policy,
    PolicyError,
    added_by,
    escalated,
    ladder_for,
)

LADDER = """
[defaults]
approvers = ["U0PRIMARY"]
required_approvals = 1
ttl = "2h"
remind_every = "5m"
escalate = [
  {after = "10m", approvers = ["S0SECONDARY"]},
  {after = "30m", approvers = ["oncall:primary"], required_approvals = 1},
]

[oncall.primary]
rotation = ["U0ANNA", "U0BORIS", "U0CLARA"]
handoff = "MON 09:00"
timezone = "Europe/Berlin"
overrides = [{user = "U0DORA", start = "2026-12-10T00:00:00", end = "2026-12-11T00:00:00"}]

[tools.run_command]
approval = "rules"

[[tools.run_command.rules]]
prefix = ["kubectl", "delete"]
approvers = ["U0LEAD", "U0OPS"]
required_approvals = 2
remind_every = "1m"
remind_max = 2
escalate = [{after = "5m", approvers = ["U0CTO"], required_approvals = 1}]

[[tools.run_command.rules]]
prefix = ["ls"]
approval = "never"
"""


def _decide(policy: Policy, command: str):  # type: ignore[no-untyped-def]
    call = ToolCall(id="c1", name="run_command", arguments=f'{{"command": "{command}"}}')
    return policy.decide("run_command", call)


def test_keys_on_defaults_and_on_a_rule() -> None:
    policy = Policy.from_toml(LADDER)
    plain = ladder_for(policy, _decide(policy, "df -h"))
    assert plain.every == timedelta(minutes=5) and plain.most == 3
    assert [s.after for s in plain.steps] == [timedelta(minutes=10), timedelta(minutes=30)]
    ruled = ladder_for(policy, _decide(policy, "kubectl delete pod x"))
    assert ruled.every == timedelta(minutes=1) and ruled.most == 2
    assert [s.approvers for s in ruled.steps] == [("U0CTO",)]


@pytest.mark.parametrize(
    ("fragment", "named"),
    [
        ('escalate = [{after = "10m", approvers = ["oncall:nobody"]}]', "oncall:nobody"),
        (
            'escalate = [{after = "20m", approvers = ["U0X1"]},'
            ' {after = "10m", approvers = ["U0X2"]}]',
            "escalate[1].after",
        ),
        (
            'escalate = [{after = "10m", approvers = ["U0X1"], required_approvals = 2}]',
            "escalate[0].required_approvals",
        ),
        ('escalate = [{after = "3h", approvers = ["U0X1"]}]', "escalate[0].after"),
        ('escalate = [{after = "10m", approvers = []}]', "defaults.escalate[0].approvers"),
        ('escalate = [{after = "10m", approvers = ["bob"]}]', "'bob'"),
        ("remind_max = 0", "remind_max"),
        ('remind_every = "often"', "remind_every"),
        ('escalate = [{after = "10m", approver = ["U0X1"]}]', "approver"),
    ],
)
def test_a_wrong_key_is_named(fragment: str, named: str) -> None:
    text = f'[defaults]\napprovers = ["U0A1"]\nttl = "2h"\n{fragment}\n'
    with pytest.raises(PolicyError) as caught:
        Policy.from_toml(text)
    assert named in str(caught.value)


def test_a_rule_that_does_not_ask_takes_no_ladder() -> None:
    text = (
        '[tools.run_command]\napproval = "rules"\n[[tools.run_command.rules]]\n'
        'prefix = ["ls"]\napproval = "never"\nremind_every = "5m"\n'
    )
    with pytest.raises(PolicyError, match="remind_every apply only"):
        Policy.from_toml(text)


def test_a_rotation_changes_hands_at_its_handoff_in_its_zone() -> None:
    spec = Policy.from_toml(LADDER).oncall["primary"]
    # Monday 2026-12-07 09:00 in Berlin is 08:00 UTC.
    before = datetime(2026, 12, 7, 7, 59, 59, tzinfo=UTC)
    at = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
    assert spec.who(before) != spec.who(at)
    week = timedelta(days=7)
    assert [spec.who(at + n * week) for n in range(4)] == [
        spec.who(at),
        *[spec.who(at + n * week) for n in (1, 2)],
        spec.who(at),
    ]
    assert len({spec.who(at + n * week) for n in range(3)}) == 3


def test_an_override_wins_while_it_holds() -> None:
    spec = Policy.from_toml(LADDER).oncall["primary"]
    # Overrides without an offset are in the rotation's zone: 2026-12-10 00:00 Berlin.
    assert spec.who(datetime(2026, 12, 9, 22, 59, tzinfo=UTC)) != "U0DORA"
    assert spec.who(datetime(2026, 12, 9, 23, 0, tzinfo=UTC)) == "U0DORA"
    assert spec.who(datetime(2026, 12, 10, 23, 0, tzinfo=UTC)) != "U0DORA"


def test_on_call_approvers_are_resolved_at_the_moment_asked() -> None:
    policy = Policy.from_toml(
        LADDER.replace('approvers = ["U0PRIMARY"]', 'approvers = ["oncall:primary"]')
    )
    monday = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
    now, later = (
        policy.approvers_for(None, None, monday - timedelta(seconds=1)),
        policy.approvers_for(None, None, monday),
    )
    assert now.users != later.users
    assert len(now.users) == 1 and now.users[0].startswith("U0")


def test_nobody_on_call_lets_nobody_decide() -> None:
    text = (
        '[defaults]\napprovers = ["oncall:night"]\n[oncall.night]\nrotation = ["U0NIGHT"]\n'
        'overrides = [{user = "U0DAY", start = "2026-01-01T00:00:00Z",'
        ' end = "2026-01-02T00:00:00Z"}]\n'
    )
    policy = Policy.from_toml(text)
    spec = policy.approvers_for(None, None, datetime(2026, 1, 1, 12, tzinfo=UTC))
    assert spec.users == ("U0DAY",)
    assert not spec.anyone
    assert NOBODY_ON_CALL not in spec.users


def test_escalation_grows_the_set_and_lowers_the_quorum() -> None:
    policy = Policy.from_toml(LADDER)
    decision = _decide(policy, "kubectl delete pod x")
    before = escalated(policy, None, decision, 0)
    assert policy.approvers_for(None, before).users == ("U0LEAD", "U0OPS")
    assert policy.required_approvals_for(None, before) == 2
    after = escalated(policy, None, decision, 1)
    spec = policy.approvers_for(None, after)
    assert spec.users == ("U0LEAD", "U0OPS", "U0CTO")
    assert policy.required_approvals_for(None, after) == 1
    assert policy.required_approvals_for(None, decision) == 2


def test_each_step_adds_its_own_and_keeps_the_earlier() -> None:
    policy = Policy.from_toml(LADDER)
    decision = _decide(policy, "df -h")
    monday = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
    one = policy.approvers_for(None, escalated(policy, None, decision, 1, monday), monday)
    assert one.users == ("U0PRIMARY",) and one.groups == ("S0SECONDARY",)
    two = policy.approvers_for(None, escalated(policy, None, decision, 2, monday), monday)
    on_call = policy.oncall["primary"].who(monday)
    assert on_call is not None
    assert set(two.users) == {"U0PRIMARY", on_call} and two.groups == ("S0SECONDARY",)
    assert added_by(policy, decision, 2, monday) == (on_call,)


def test_anyone_in_the_channel_stays_anyone() -> None:
    policy = Policy.from_toml('[defaults]\nescalate = [{after = "1m", approvers = ["U0BOSS"]}]\n')
    decision = _decide(policy, "df -h")
    assert escalated(policy, None, decision, 0) is decision  # no step, no on-call: unchanged
    assert policy.approvers_for(None, escalated(policy, None, decision, 1)).anyone


def test_policy_explain_prints_the_ladder_and_who_is_on_call() -> None:
    import io

    from bot.cli.policy import explain

    policy = Policy.from_toml(LADDER)
    monday = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
    out = io.StringIO()
    assert explain(policy, "run_command", "df -h", out=out, now=monday) == 0
    lines = out.getvalue().splitlines()
    assert "reminders: every 5m to who may still decide, at most 3" in lines
    assert "escalate 1: after 10m add S0SECONDARY" in lines
    assert "escalate 2: after 30m add oncall:primary, quorum 1" in lines
    assert f"on call: oncall:primary = {policy.oncall['primary'].who(monday)}" in lines


def test_the_readme_worked_example_is_real() -> None:
    import io
    from pathlib import Path

    from bot.cli.policy import explain

    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## When nobody answers", 1)[1]
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    shown = section.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    policy = Policy.from_toml(toml)
    out = io.StringIO()
    explain(policy, "run_command", "systemctl restart api", out=out, now=datetime.now(UTC))
    lines = out.getvalue().splitlines()
    assert shown[:3] == [line for line in lines if line.startswith(("reminders", "escalate"))]
    assert shown[3].startswith("on call: oncall:primary = U0")
    assert any(line.startswith("on call: oncall:primary = U0") for line in lines)
