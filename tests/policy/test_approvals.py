"""Every authorisation rule, answered as a typed verdict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from agent_core import ToolCall
from bot.approvals import Allowed, Approvals, GroupResolver, Refused
from bot.policy import GateDecision, Policy
from bot.slack.answers import refusal_text

ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"


async def members(group: str) -> list[str]:
    if group == "S0DOWN":
        raise ConnectionError("usergroups.users.list failed")
    return [CAROL] if group == "S0ONCALL" else []


def approvals(toml: str = "") -> Approvals:
    return Approvals(Policy.from_toml(toml), members)


async def test_the_requester_may_reject_and_cancel_but_not_approve() -> None:
    rules = approvals(f'[defaults]\napprovers = ["{BOB}"]\n')
    for action in ("reject", "cancel", "withdraw"):
        verdict = await rules.check(action, channel="C1", user=ALICE, requester=ALICE)
        assert isinstance(verdict, Allowed), action
    verdict = await rules.check("approve", channel="C1", user=ALICE, requester=ALICE)
    assert isinstance(verdict, Refused) and verdict.reason == "self_approval"


async def test_self_approval_when_the_policy_allows_it() -> None:
    rules = approvals("[defaults]\nallow_self_approval = true\n")
    verdict = await rules.check("approve", channel="C1", user=ALICE, requester=ALICE)
    assert isinstance(verdict, Allowed)


async def test_listed_users_and_group_members_approve_others_do_not() -> None:
    rules = approvals(f'[defaults]\napprovers = ["{BOB}", "S0ONCALL"]\n')
    assert isinstance(
        await rules.check("approve", channel="C1", user=BOB, requester=ALICE), Allowed
    )
    by_group = await rules.check("approve", channel="C1", user=CAROL, requester=ALICE)
    assert isinstance(by_group, Allowed) and "S0ONCALL" in by_group.rule
    other = await rules.check("reject", channel="C1", user="U0DAVE", requester=ALICE)
    assert isinstance(other, Refused) and other.reason == "not_an_approver"
    assert other.who.users == (BOB,) and other.who.groups == ("S0ONCALL",)
    assert other.who.requester == ALICE  # the requester may reject: a renderer names them


async def test_a_group_that_cannot_be_looked_up_refuses_and_says_so() -> None:
    rules = approvals('[defaults]\napprovers = ["S0DOWN"]\n')
    verdict = await rules.check("approve", channel="C1", user=CAROL, requester=ALICE)
    assert isinstance(verdict, Refused) and verdict.reason == "groups_unavailable"
    assert verdict.unresolved_groups == ("S0DOWN",)


async def test_anyone_means_anyone_of_the_sessions_workspace() -> None:
    rules = approvals()
    home = await rules.check(
        "approve", channel="C1", user=BOB, requester=ALICE, user_team="T1", home_team="T1"
    )
    assert isinstance(home, Allowed)
    other = await rules.check(
        "approve", channel="C1", user=BOB, requester=ALICE, user_team="T2", home_team="T1"
    )
    assert isinstance(other, Refused) and other.reason == "other_workspace"


# --- ported from the policy layer's former `check_approver` (same cases, same meaning) ---------

POLICIES = Path(__file__).parent.parent / "fixtures" / "policies"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeGroups:
    """Stands in for Slack's usergroups.users.list; counts the calls it gets."""

    def __init__(self, members: dict[str, list[str]]) -> None:
        self.members = members
        self.calls: list[str] = []
        self.fail = False

    async def __call__(self, group_id: str) -> Sequence[str]:
        self.calls.append(group_id)
        if self.fail:
            raise ConnectionError("slack is down")
        return self.members[group_id]


async def test_self_approval_refused_with_the_way_to_change_it() -> None:
    rules = Approvals(Policy.default(), FakeGroups({}))
    check = await rules.check("approve", channel="C1", user="U1", requester="U1")
    assert isinstance(check, Refused) and check.reason == "self_approval"
    assert "cannot approve it yourself" in refusal_text(check)
    assert "set allow_self_approval = true in the policy file" in refusal_text(check)
    assert check.rule == "defaults.allow_self_approval = false"

    other = await rules.check("approve", channel="C1", user="U2", requester="U1")
    assert isinstance(other, Allowed)
    assert "anyone in the channel" in other.rule


async def test_anyone_in_the_channel_means_anyone_of_the_sessions_workspace_ported() -> None:
    rules = Approvals(Policy.default(), FakeGroups({}))
    guest = await rules.check(
        "approve",
        channel="C1",
        user="U0GUEST9",
        requester="U1",
        user_team="T0PARTNER",
        home_team="T0HOME",
    )
    assert isinstance(guest, Refused) and guest.reason == "other_workspace"
    assert "Only members of this workspace" in refusal_text(guest)
    colleague = await rules.check(
        "approve", channel="C1", user="U2", requester="U1", user_team="T0HOME", home_team="T0HOME"
    )
    assert isinstance(colleague, Allowed)
    named = Approvals(Policy.from_toml('[defaults]\napprovers = ["U0GUEST9"]\n'), FakeGroups({}))
    listed_guest = await named.check(
        "approve",
        channel="C1",
        user="U0GUEST9",
        requester="U1",
        user_team="T0PARTNER",
        home_team="T0HOME",
    )
    assert isinstance(listed_guest, Allowed)  # naming people lets them in from anywhere


async def test_self_approval_allowed_when_the_file_says_so() -> None:
    rules = Approvals(Policy.load(POLICIES / "self_approval.toml"), FakeGroups({}))
    check = await rules.check("approve", channel="C1", user="U1", requester="U1")
    assert isinstance(check, Allowed)


async def test_two_of_many_distinct_approvers() -> None:
    policy = Policy.load(POLICIES / "two_person.toml")
    rules = Approvals(policy, FakeGroups({"S0OPS": ["U333", "U444"]}))
    assert policy.required_approvals_for("C1") == 2

    async def may(user: str) -> bool:
        verdict = await rules.check("approve", channel="C1", user=user, requester="U111")
        return isinstance(verdict, Allowed)

    assert await may("U222")  # listed
    assert await may("U333")  # via the user group
    assert not await may("U111")  # the requester, although listed
    assert not await may("U555")  # nobody


async def test_non_approver_is_told_who_may_approve() -> None:
    rules = Approvals(Policy.load(POLICIES / "good.toml"), FakeGroups({"S0GROUP": ["U321"]}))
    check = await rules.check("approve", channel="C456", user="U555", requester="U1")
    assert isinstance(check, Refused) and check.reason == "not_an_approver"
    assert refusal_text(check) == "Only <@U123> or members of <!subteam^S0GROUP> may approve this."
    assert check.rule == "defaults.approvers: U555 is not an approver"

    in_c123 = await rules.check("approve", channel="C123", user="U123", requester="U1")
    assert isinstance(in_c123, Refused)  # the channel's own list replaces the default one
    assert refusal_text(in_c123) == "Only <@U999>, <@W777> or <@U888> may approve this."


async def test_user_group_member_may_approve() -> None:
    fetch = FakeGroups({"S0GROUP": ["U321", "U654"]})
    rules = Approvals(Policy.load(POLICIES / "good.toml"), fetch)
    check = await rules.check("approve", channel="C456", user="U654", requester="U1")
    assert isinstance(check, Allowed)
    assert check.rule == "defaults.approvers: member of S0GROUP"
    assert fetch.calls == ["S0GROUP"]


async def test_group_lookup_failure_refuses_and_says_so() -> None:
    fetch = FakeGroups({"S0GROUP": ["U654"]})
    fetch.fail = True
    rules = Approvals(Policy.load(POLICIES / "good.toml"), fetch)
    check = await rules.check("approve", channel="C456", user="U654", requester="U1")
    assert isinstance(check, Refused) and check.reason == "groups_unavailable"
    assert "could not be looked up" in refusal_text(check)


async def test_group_members_cached_for_ttl() -> None:
    clock = FakeClock()
    fetch = FakeGroups({"S1": ["U1"], "S2": ["U2"]})
    resolver = GroupResolver(fetch, ttl=timedelta(minutes=5), clock=clock)

    assert await resolver.members("S1") == frozenset({"U1"})
    clock.now += 299
    fetch.members["S1"] = ["U1", "U9"]
    assert await resolver.is_member("S1", "U9") is False  # cache hit: the old list
    assert fetch.calls == ["S1"]

    clock.now += 1  # exactly ttl after the fetch: stale
    assert await resolver.is_member("S1", "U9") is True
    assert fetch.calls == ["S1", "S1"]

    assert await resolver.members("S2") == frozenset({"U2"})  # groups cached separately
    assert fetch.calls == ["S1", "S1", "S2"]
    resolver.forget("S2")
    await resolver.members("S2")
    assert fetch.calls == ["S1", "S1", "S2", "S2"]


async def test_failed_group_fetch_is_not_cached() -> None:
    fetch = FakeGroups({"S1": ["U1"]})
    resolver = GroupResolver(fetch, clock=FakeClock())
    fetch.fail = True
    with pytest.raises(ConnectionError):
        await resolver.members("S1")
    fetch.fail = False
    assert await resolver.members("S1") == frozenset({"U1"})
    assert len(fetch.calls) == 2


async def test_a_rules_approvers_replace_the_channels_for_its_calls() -> None:
    policy = Policy.from_toml(
        f'[defaults]\napprovers = ["{BOB}"]\n'
        f'[channels_policy.C0OPS]\napprovers = ["{BOB}"]\n'
        '[tools.run_command]\napproval = "rules"\n'
        '[[tools.run_command.rules]]\nprefix = ["kubectl", "delete"]\n'
        f'approvers = ["{CAROL}", "S0ONCALL"]\n'
    )
    rules = Approvals(policy, members)

    def decision(command: str) -> GateDecision:
        arguments = json.dumps({"command": command})
        return policy.decide(
            "run_command", ToolCall(id="c", name="run_command", arguments=arguments)
        )

    delete = decision("kubectl delete pod web")
    refused = await rules.check(
        "approve", channel="C0OPS", user=BOB, requester=ALICE, decision=delete
    )
    assert isinstance(refused, Refused) and refused.reason == "not_an_approver"
    assert refused.rule == f"tools.run_command.rules[0].approvers: {BOB} is not an approver"
    assert refused.who.users == (CAROL,) and refused.who.groups == ("S0ONCALL",)
    allowed = await rules.check(
        "approve", channel="C0OPS", user=CAROL, requester=ALICE, decision=delete
    )
    assert isinstance(allowed, Allowed) and "tools.run_command.rules[0]" in allowed.rule
    # Calls no rule of its own decides keep the channel's approvers.
    ls = decision("ls")
    assert isinstance(
        await rules.check("approve", channel="C0OPS", user=BOB, requester=ALICE, decision=ls),
        Allowed,
    )
