"""Strictest part wins means every part's requirement holds at once: a call whose parts match
several rules that ask carries each rule's approvers and quorum, and the one gate says which of
them a person counts toward."""

from __future__ import annotations

import io
import json

from agent_core import ToolCall
from bot.approvals import Allowed, Approvals, Refused
from bot.cli.policy import explain
from bot.policy import GateDecision, Policy, Requirement

ALICE, DEP, DB1, DB2, BOTH = "U0ALICE", "U0DEP", "U0DB1", "U0DB2", "U0BOTH"

DEPLOY_AND_DROP = f"""
[defaults]
approvers = ["{DB1}", "{DB2}", "{BOTH}"]
required_approvals = 2
[tools.run_command]
approval = "rules"
allow_for = "1h"
[[tools.run_command.rules]]
prefix = ["deploy"]
approvers = ["{DEP}", "{BOTH}"]
required_approvals = 1
[[tools.run_command.rules]]
prefix = ["drop-db"]
"""


def decide(policy: Policy, command: str) -> GateDecision:
    arguments = json.dumps({"command": command})
    return policy.decide("run_command", ToolCall(id="c1", name="run_command", arguments=arguments))


def test_each_matched_rule_that_asks_is_a_requirement() -> None:
    policy = Policy.from_toml(DEPLOY_AND_DROP)
    decision = decide(policy, "deploy app; drop-db prod")
    # The single-rule fields still name the deciding rule (the audit's policy_rule).
    assert decision.policy_rule == "tools.run_command.rules[0]"
    assert decision.needs() == (
        Requirement("tools.run_command.rules[0]", "deploy …", (DEP, BOTH), 1),
        Requirement("tools.run_command.rules[1]", "drop-db …", None, None),
    )
    # The drop-db part needs the channel's two approvals, whatever the deploy rule says.
    drop = decision.under(decision.needs()[1])
    assert policy.required_approvals_for("C1", drop) == 2
    assert policy.approvers_for("C1", drop).users == (DB1, DB2, BOTH)
    assert policy.allow_window("run_command", "C1", decision) is None


def test_one_rule_keeps_one_requirement() -> None:
    policy = Policy.from_toml(DEPLOY_AND_DROP)
    for command in ("deploy app", "deploy app; deploy web"):
        decision = decide(policy, command)
        assert decision.requirements == ()
        assert decision.needs() == (
            Requirement("tools.run_command.rules[0]", "deploy …", (DEP, BOTH), 1),
        )
        assert policy.allow_window("run_command", "C1", decision) is not None
    # A command no rule names takes the tool's default (`always`): the channel's approvers.
    assert [n.key for n in decide(policy, "ls").needs()] == ["channel"]


def test_a_part_no_rule_judges_adds_the_channels_requirement() -> None:
    decision = decide(Policy.from_toml(DEPLOY_AND_DROP), "deploy app; echo $(id)")
    assert [n.key for n in decision.needs()] == ["tools.run_command.rules[0]", "channel"]


async def test_an_approver_counts_toward_each_set_they_belong_to_and_no_other() -> None:
    policy = Policy.from_toml(DEPLOY_AND_DROP)
    rules = Approvals(policy)
    decision = decide(policy, "deploy app; drop-db prod")
    deploy, drop = (n.key for n in decision.needs())
    for user, counts in ((DEP, (deploy,)), (DB1, (drop,)), (BOTH, (deploy, drop))):
        verdict = await rules.check(
            "approve", channel="C1", user=user, requester=ALICE, decision=decision
        )
        assert isinstance(verdict, Allowed) and verdict.counts == counts, user
    stranger = await rules.check(
        "approve", channel="C1", user="U0EVE", requester=ALICE, decision=decision
    )
    assert isinstance(stranger, Refused) and stranger.reason == "not_an_approver"
    assert set(stranger.who.users) == {DEP, DB1, DB2, BOTH}
    own = await rules.check("approve", channel="C1", user=BOTH, requester=BOTH, decision=decision)
    assert isinstance(own, Refused) and own.reason == "self_approval"


def test_policy_explain_names_every_rule_that_must_approve() -> None:
    out = io.StringIO()
    explain(Policy.from_toml(DEPLOY_AND_DROP), "run_command", "deploy app; drop-db prod", out=out)
    [verdict] = [line for line in out.getvalue().splitlines() if line.startswith("verdict:")]
    assert verdict == (
        "verdict: every one of these must approve: "
        f"tools.run_command.rules[0] needs 1 approval from {DEP}, {BOTH}; "
        f"tools.run_command.rules[1] needs 2 approvals from {DB1}, {DB2}, {BOTH}"
    )
