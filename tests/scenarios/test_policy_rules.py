"""Command-aware policy rules end to end: signed requests into the real Bolt app, the
Slack Web API and LLM stand-ins, real commands and the real SQLite file."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from bot.cli.check import run_check
from bot.cli.policy import explain
from bot.policy import Policy, PolicyError
from bot.slack.ids import ACTION_FIELD, CALLBACK_EDIT
from tests.processes.test_cli import settings_for
from tests.scenarios.test_app import ALICE, BOB, CAROL, make_tools, tool_messages
from tests.support.harness import CHANNEL, Bot, running_bot
from tests.support.slack_requests import interaction_body, view_submission

SRE1, SRE2 = "U0SRE1", "U0SRE2"


def _blocks(card: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = card["params"]["blocks"]
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def _buttons(blocks: list[dict[str, Any]]) -> list[str]:
    return [
        e["text"]["text"]
        for b in blocks
        if b.get("type") == "actions"
        for e in b.get("elements", [])
    ]


async def _audit(bot: Bot, event: str) -> list[dict[str, Any]]:
    return [dict(a.details) for a in await bot.deps.store.audit_rows() if a.event == event]


ECHO_FREE_RM_GATED = """
[tools.run_command]
approval = "rules"
default = "never"
[[tools.run_command.rules]]
prefix = ["echo"]
approval = "never"
[[tools.run_command.rules]]
prefix = ["rm"]
justification = "Deleting files."
"""


async def test_a_compound_command_is_judged_by_its_rm_part(tmp_path: Path) -> None:
    policy = Policy.from_toml(ECHO_FREE_RM_GATED)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo ok"})])
        bot.llm.reply_tool_calls(
            [("call_2", "run_command", {"command": "echo ok; rm -rf /srv/app/x"})]
        )
        await bot.mention("clean up", user=ALICE)
        [card] = await bot.wait_cards(1)  # echo ran without one; the compound waits
        [first] = tool_messages(bot.llm.requests[1])
        assert "ok" in first["content"] and len(bot.cards()) == 1
        assert "rm -rf /srv/app/x" in json.dumps(_blocks(card))
        [gate] = await _audit(bot, "gate")
        assert gate["policy_rule"] == "tools.run_command.rules[1]"
        assert gate["rule"].startswith("tools.run_command.rules[1] (rm …)")
        await bot.click("opsgate_reject", card["ledger_id"], user=BOB)  # it never runs


@pytest.mark.parametrize(
    ("command", "output"), [('bash -c "echo hi"', "hi"), ("echo $(id -u)", str(os.getuid()))]
)
async def test_sh_c_and_substitution_need_approval_under_a_never_rule(
    tmp_path: Path, command: str, output: str
) -> None:
    policy = Policy.from_toml(ECHO_FREE_RM_GATED)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": command})])
        bot.llm.reply_text("Done.")
        await bot.mention("run it", user=ALICE)
        [card] = await bot.wait_cards(1)
        assert _buttons(_blocks(card))[0] == "Approve"
        [gate] = await _audit(bot, "gate")
        assert gate["policy_rule"] is None and "approval required" in gate["rule"]
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert output in result["content"]


FORBIDDEN = """
[tools.run_command]
approval = "rules"
[[tools.run_command.rules]]
prefix = ["touch"]
approval = "forbidden"
justification = "Files here are managed by Puppet"
"""


async def test_a_forbidden_call_gets_no_approve_never_runs_and_the_model_is_told_why(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "must-not-exist"
    policy = Policy.from_toml(FORBIDDEN)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": f"touch {marker}"})])
        bot.llm.reply_text("I will not touch it.")
        await bot.mention("touch it", user=ALICE)
        [card] = await bot.wait_cards(1)
        posted = _blocks(card)
        assert "Approve" not in _buttons(posted) and "Edit" not in _buttons(posted)
        assert "forbids this call" in json.dumps(posted)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert result["content"].startswith("Rejected: Forbidden by the policy")
        assert "tools.run_command.rules[0]" in result["content"]
        assert "Files here are managed by Puppet" in result["content"]
        assert not marker.exists()
        redrawn = bot.slack.calls_to("chat.update")[-1].params
        assert not any(b["type"] == "actions" for b in redrawn["blocks"])
        [decision] = await _audit(bot, "decision")
        assert decision["decision"] == "rejected"
        assert decision["policy_rule"] == "tools.run_command.rules[0]"
        # A click on the card changes nothing.
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.settle()
        assert len(bot.llm.requests) == 2 and not marker.exists()


KUBECTL_DELETE = f"""
[defaults]
approvers = ["{BOB}", "{CAROL}"]
[tools.run_command]
approval = "rules"
[[tools.run_command.rules]]
prefix = ["kubectl", "delete"]
approvers = ["{SRE1}", "{SRE2}"]
required_approvals = 2
justification = "Deleting needs two SREs."
"""


async def test_a_rules_own_approvers_replace_the_channels_with_two_approvals(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(KUBECTL_DELETE)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        command = "kubectl delete pod web-1"
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": command})])
        bot.llm.reply_text("Deleted.")
        await bot.mention("delete web-1", user=ALICE)
        [card] = await bot.wait_cards(1)
        assert "2 approvals" in json.dumps(_blocks(card)) or "0 of 2" in json.dumps(_blocks(card))
        shown = json.dumps(_blocks(card), ensure_ascii=False)
        assert "tools.run_command.rules[0] (kubectl delete …)" in shown
        assert "Deleting needs two SREs." in shown

        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)  # a channel approver
        await bot.settle()
        [refusal] = await _audit(bot, "refusal")
        assert refusal["reason"] == "not_an_approver"
        assert refusal["rule"].startswith("tools.run_command.rules[0].approvers")
        assert refusal["policy_rule"] == "tools.run_command.rules[0]"
        told = bot.slack.calls_to("chat.postEphemeral")[-1].params
        assert told["user"] == BOB and SRE1 in str(told["text"])

        await bot.click("opsgate_approve", card["ledger_id"], user=SRE1)
        await bot.settle()
        assert len(bot.llm.requests) == 1, "one approval of two must not resume"
        await bot.click("opsgate_approve", card["ledger_id"], user=SRE2)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and set(row.approvals) == {SRE1, SRE2}
        decisions = await _audit(bot, "decision")
        assert [d["policy_rule"] for d in decisions] == ["tools.run_command.rules[0]"] * 2
        assert [d["policy_match"] for d in decisions] == ["kubectl delete …"] * 2  # its prefix
        assert decisions[-1]["final"] is True and decisions[-1]["required_approvals"] == 2


async def test_examples_that_do_not_match_stop_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "opsgate.toml"
    bad.write_text(
        '[tools.run_command]\napproval = "rules"\n'
        '[[tools.run_command.rules]]\nprefix = ["kubectl", "get"]\n'
        'examples = ["kubectl describe pod web"]\n'
    )
    with pytest.raises(PolicyError) as caught:
        async with running_bot(
            tmp_path, tools=make_tools(tmp_path), settings={"opsgate_policy": bad}
        ):
            pass
    assert "tools.run_command.rules[0]: example 'kubectl describe pod web'" in str(caught.value)


TOKEN_PREFIX = """
[tools.run_command]
approval = "rules"
allow_for = "1h"
[[tools.run_command.rules]]
prefix = ["kubectl", "get"]
allow_prefix = ["kubectl", "get", "pods"]
"""


async def test_a_token_prefix_allowance_covers_more_words_but_not_a_compound_command(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(TOKEN_PREFIX)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "kubectl get pods"})])
        bot.llm.reply_text("Listed.")
        await bot.mention("pods?", user=ALICE, ts="1700000001.000100")
        [card] = await bot.wait_cards(1)
        assert "Allow for 1h" in _buttons(_blocks(card))
        await bot.click("opsgate_allow", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [allowance] = await bot.deps.store.active_allowances()
        assert "kubectl get pods …" in allowance.label

        bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "kubectl get pods -n a"})])
        bot.llm.reply_text("Listed again.")
        await bot.mention("pods in a?", user=CAROL, ts="1700000002.000100")
        await bot.llm.wait_for_requests(4)
        await bot.settle()
        assert len(bot.cards()) == 1
        used = await _audit(bot, "allowance_used")
        assert [u["allowance_id"] for u in used] == [allowance.id]

        out = io.StringIO()
        explain(
            policy,
            "run_command",
            "kubectl get pods -n b",
            channel=CHANNEL,
            allowances=await bot.deps.store.active_allowances(),
            out=out,
        )
        assert f"verdict: covered by allowance {allowance.id}" in out.getvalue()

        marker = tmp_path / "must-not-exist"
        bot.llm.reply_tool_calls(
            [("call_3", "run_command", {"command": f"kubectl get pods; touch {marker}"})]
        )
        await bot.mention("pods and more", user=CAROL, ts="1700000003.000100")
        await bot.wait_cards(2)
        assert not marker.exists()
        assert len(await _audit(bot, "allowance_used")) == 1


async def test_an_edit_into_a_forbidden_command_is_refused_and_nothing_runs(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "must-not-exist"
    policy = Policy.from_toml(FORBIDDEN + '[[tools.run_command.rules]]\nprefix = ["echo"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi"})])
        await bot.mention("say hi", user=ALICE)
        [card] = await bot.wait_cards(1)
        payload = view_submission(
            CALLBACK_EDIT,
            card["ledger_id"],
            {"command": {ACTION_FIELD: f"touch {marker}"}},
            user=BOB,
        )
        await bot.post(interaction_body(payload), "application/x-www-form-urlencoded")
        await bot.settle()
        told = bot.slack.calls_to("chat.postEphemeral")[-1].params
        assert told["user"] == BOB and "forbids this call" in str(told["text"])
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending" and row.edited_arguments is None
        assert len(bot.llm.requests) == 1 and not marker.exists()


async def test_a_forbidden_call_does_not_hold_its_batch_siblings_run(tmp_path: Path) -> None:
    marker = tmp_path / "must-not-exist"
    policy = Policy.from_toml(FORBIDDEN)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls(
            [
                ("call_1", "run_command", {"command": f"touch {marker}"}),
                ("call_2", "echo", {"text": "sibling"}),
            ]
        )
        bot.llm.reply_text("The touch was forbidden; the echo ran.")
        await bot.mention("both", user=ALICE)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        forbidden, sibling = tool_messages(bot.llm.requests[1])
        assert forbidden["content"].startswith("Rejected: Forbidden by the policy")
        assert sibling["content"] == "echo: sibling"
        assert not marker.exists()


ALLOW_ALWAYS = '[tools.run_command]\napproval = "always"\nallow_for = "1h"\n'


def _view(call: Any) -> dict[str, Any]:
    view = call.params["view"]
    return json.loads(view) if isinstance(view, str) else dict(view)


async def test_the_allow_dialog_offers_shapes_with_examples_and_allows_the_chosen_one(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(ALLOW_ALWAYS)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi there -n"})])
        bot.llm.reply_text("Done.")
        await bot.mention("say hi", user=ALICE, ts="1700000001.000100")
        [card] = await bot.wait_cards(1)
        [allow] = [
            e
            for b in _blocks(card)
            if b.get("type") == "actions"
            for e in b["elements"]
            if e["action_id"] == "opsgate_allow"
        ]
        assert allow["text"]["text"] == "Allow for 1h" and "confirm" not in allow

        await bot.click("opsgate_allow", card["ledger_id"], user=BOB)
        [opened] = await bot.slack.wait_for("views.open")
        modal = _view(opened)
        assert modal["callback_id"] == "opsgate_allow_modal"
        [choice] = [b for b in modal["blocks"] if b.get("block_id") == "allow_shape"]
        assert choice["element"]["type"] == "radio_buttons"
        labels = [o["text"]["text"] for o in choice["element"]["options"]]
        assert labels == ["exact: echo hi there -n", "echo hi there …", "echo hi …"]
        [context] = [b for b in modal["blocks"] if b["type"] == "context"]
        assert "covers" in json.dumps(context) and "rm -rf x" in json.dumps(context)
        assert await bot.deps.store.active_allowances() == []  # nothing before the choice

        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None
        picked = {"type": "radio_buttons", "selected_option": {"value": "1"}}
        payload = view_submission(
            "opsgate_allow_modal",
            f"{card['ledger_id']} {row.running_digest}",
            {"allow_shape": {"allow_shape_choice": picked}},
            user=BOB,
        )
        await bot.post(interaction_body(payload), "application/x-www-form-urlencoded")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [allowance] = await bot.deps.store.active_allowances()
        assert allowance.label.startswith("echo hi there …")

        bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "echo hi there again"})])
        bot.llm.reply_text("Again.")
        await bot.mention("again", user=CAROL, ts="1700000002.000100")
        await bot.llm.wait_for_requests(4)
        await bot.settle()
        assert len(bot.cards()) == 1
        [result] = tool_messages(bot.llm.requests[3])
        assert "hi there again" in result["content"]
        bot.llm.reply_tool_calls([("call_3", "run_command", {"command": "echo hi other"})])
        await bot.mention("other", user=CAROL, ts="1700000003.000100")
        await bot.wait_cards(2)  # not the chosen shape: a card


async def test_a_dialog_choice_made_for_a_call_edited_since_counts_for_nothing(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(ALLOW_ALWAYS)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi there -n"})])
        await bot.mention("say hi", user=ALICE)
        [card] = await bot.wait_cards(1)
        picked = {"type": "radio_buttons", "selected_option": {"value": "2"}}
        payload = view_submission(
            "opsgate_allow_modal",
            f"{card['ledger_id']} 0000000000000000",
            {"allow_shape": {"allow_shape_choice": picked}},
            user=BOB,
        )
        await bot.post(interaction_body(payload), "application/x-www-form-urlencoded")
        await bot.settle()
        assert await bot.deps.store.active_allowances() == []
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending"
        assert [r["why"] for r in await _audit(bot, "refusal")] == ["arguments_changed"]


KUBECTL = Path(__file__).parents[1] / "fixtures" / "policies" / "kubectl.toml"


async def test_help_and_the_home_tab_say_the_rules_in_plain_words(tmp_path: Path) -> None:
    policy = Policy.load(KUBECTL)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        _, hook = await bot.slash("help", user=ALICE)
        [answer] = await bot.hook_answers(hook)
        text = str(answer["text"])
        assert "asks for approval for kubectl delete … (2 approvals)" in text
        assert "kubectl apply … (preview: kubectl diff -f {arg:-f|--filename})" in text
        assert "commands it cannot judge" in text
        assert "never runs kubectl delete namespace" in text and "runs freely kubectl get …" in text
        home = await bot.service.home.view(BOB, team="T0TEST")
        assert "never runs kubectl delete namespace" in home.policy
        assert "asks for approval for kubectl delete … (2 approvals)" in home.policy
        await bot.settle()


async def test_opsgate_check_fails_naming_a_rule_whose_example_does_not_match(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "opsgate.toml"
    bad.write_text(
        '[tools.run_command]\napproval = "rules"\n'
        '[[tools.run_command.rules]]\nprefix = ["kubectl", "get"]\n'
        'not_examples = ["kubectl get pods"]\n'
    )
    settings = settings_for(tmp_path, "http://127.0.0.1:9/v1").model_copy(
        update={"opsgate_policy": bad}
    )
    out = io.StringIO()
    assert await run_check(out=out, settings=settings) == 1
    [line] = [line for line in out.getvalue().splitlines() if "policy" in line]
    assert line.startswith("FAIL") and "tools.run_command.rules[0]: not_example" in line
