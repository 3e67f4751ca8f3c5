"""Every authorisation rule, answered as a typed verdict."""

from __future__ import annotations

from bot.approvals import Allowed, Approvals, Refused
from bot.policy import Policy

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
