"""`[[freezes]]`, `freeze_admins`, `break_glass_approvers` and `break_glass` in the policy file:
which window holds a moment, and the mistakes that stop start-up, named."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent_core import ToolCall
from bot.policy import Policy, PolicyError

FRIDAY = """
[[freezes]]
schedule = "0 17 * * 5"
duration = "63h"
message = "Weekend"

[[freezes]]
start = 2026-12-24T00:00:00Z
end = 2026-12-27T00:00:00Z
channels = ["C0OPS"]
tools = ["run_command"]
"""


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 12, day, hour, minute, tzinfo=UTC)


def test_a_scheduled_window_holds_from_its_firing_for_its_duration() -> None:
    policy = Policy.from_toml(FRIDAY)
    assert policy.active_freezes(at(4, 16, 59)) == []  # Friday 4 December, a minute before
    [friday] = policy.active_freezes(at(4, 17))
    assert friday.key == "freezes[0]" and friday.message == "Weekend"
    assert (friday.started_at, friday.until) == (at(4, 17), at(7, 8))
    assert [f.key for f in policy.active_freezes(at(7, 7, 59))] == ["freezes[0]"]
    assert policy.active_freezes(at(7, 8)) == []
    [ended] = policy.ended_freezes(at(7, 8))
    assert ended.started_at == at(4, 17)


def test_a_fixed_window_covers_only_its_channels_and_tools() -> None:
    policy = Policy.from_toml(FRIDAY)
    [christmas] = [f for f in policy.active_freezes(at(24, 12)) if f.key == "freezes[1]"]
    assert christmas.covers("C0OPS", "run_command")
    assert not christmas.covers("C0ELSE", "run_command")
    assert not christmas.covers("C0OPS", "http_request")
    assert "freezes[1]" in [f.key for f in policy.ended_freezes(at(27, 0))]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[[freezes]]\nschedule = "0 17 * * 5"\nduraton = "1h"',
            "unknown key 'freezes[0].duraton'",
        ),
        ('[[freezes]]\nschedule = "0 17 * *"\nduration = "1h"', "not a five-field cron"),
        ('[[freezes]]\nschedule = "0 25 * * 5"\nduration = "1h"', "not a valid cron expression"),
        ('[[freezes]]\nschedule = "0 17 * * 5"', "a `schedule` needs a `duration`"),
        (
            "[[freezes]]\nstart = 2026-12-24T00:00:00\nend = 2026-12-27T00:00:00Z",
            "freezes[0].start: 2026-12-24T00:00:00 has no UTC offset",
        ),
        (
            "[[freezes]]\nstart = 2026-12-27T00:00:00Z\nend = 2026-12-24T00:00:00Z",
            "`end` must be after `start`",
        ),
        ('[defaults]\nfreeze_admin = ["U0CAROL"]', "unknown key 'defaults.freeze_admin'"),
        ('[defaults]\nbreak_glass_approvers = ["bob"]', "defaults.break_glass_approvers[0]"),
        (
            '[tools.run_command]\napproval = "rules"\n[[tools.run_command.rules]]\n'
            'prefix = ["rm"]\napproval = "forbidden"\nbreak_glass = true',
            "tools.run_command.rules[0]: break_glass: a forbidden call is never run",
        ),
        (
            '[[freezes]]\nstart = 2026-12-24T00:00:00Z\nend = 2026-12-27T00:00:00Z\nchanel = "x"',
            "did you mean 'channels'?",
        ),
    ],
)
def test_mistakes_stop_start_up_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as raised:
        Policy.from_toml(text, source="opsgate.toml")
    assert message in str(raised.value)
    assert str(raised.value).startswith("policy file opsgate.toml:")


def test_a_freeze_naming_an_unknown_tool_stops_start_up() -> None:
    policy = Policy.from_toml(
        '[[freezes]]\nstart = 2026-12-24T00:00:00Z\nend = 2026-12-27T00:00:00Z\ntools = ["kubctl"]'
    )
    with pytest.raises(PolicyError, match=r"freezes\[0\]\.tools: unknown tool 'kubctl'"):
        policy.check_tools(["run_command", "kubectl"])


def test_break_glass_comes_from_the_tool_or_the_rule_and_its_approvers_from_both() -> None:
    policy = Policy.from_toml(
        """
        [defaults]
        break_glass_approvers = ["U0DAVE"]
        [tools.run_command]
        approval = "rules"
        [[tools.run_command.rules]]
        prefix = ["kubectl", "delete"]
        approvers = ["U0SRE1", "U0SRE2"]
        break_glass = true
        [[tools.run_command.rules]]
        prefix = ["kubectl", "apply"]
        """
    )

    delete = policy.decide(
        "run_command",
        ToolCall(id="c", name="run_command", arguments='{"command": "kubectl delete pod x"}'),
    )
    apply = policy.decide(
        "run_command",
        ToolCall(id="c", name="run_command", arguments='{"command": "kubectl apply -f x"}'),
    )
    assert delete.break_glass and not apply.break_glass
    spec = policy.break_glass_approvers(delete)
    assert spec.users == ("U0DAVE", "U0SRE1", "U0SRE2")
    assert policy.break_glass_approvers(apply).users == ("U0DAVE",)
    everything = Policy.from_toml('[tools.run_command]\napproval = "always"\nbreak_glass = true')
    call = ToolCall(id="c", name="run_command", arguments='{"command": "ls"}')
    assert everything.decide("run_command", call).break_glass
    assert not Policy.default().decide("run_command", call).break_glass
