"""Every part's requirement holds at once, end to end: signed clicks into the real Bolt app,
the Slack Web API and LLM stand-ins, the real SQLite file. In `deploy app; drop-db prod` the
deploy rule's one approval by its own approver does not run the drop-db part, which needs the
channel's two; a person in both sets counts toward both."""

from __future__ import annotations

import json
from typing import Any

from bot.policy import Policy
from tests.scenarios.test_app import ALICE, BOB, CAROL, make_tools
from tests.support.harness import CHANNEL, Bot, running_bot

DAVE, ERIN, FRANK = "U0DAVE", "U0ERIN", "U0FRANK"

POLICY = f"""
[defaults]
approvers = ["{CAROL}", "{DAVE}", "{ERIN}"]
required_approvals = 2
[tools.run_command]
approval = "rules"
allow_for = "1h"
[[tools.run_command.rules]]
prefix = ["deploy"]
approvers = ["{BOB}", "{ERIN}"]
required_approvals = 1
[[tools.run_command.rules]]
prefix = ["drop-db"]
"""
COMMAND = "deploy app; drop-db prod"


def _drawn(bot: Bot, ledger_id: str, ts: str) -> str:
    message = bot.slack.message(CHANNEL, ts)
    assert message is not None, ledger_id
    return json.dumps(message.get("blocks"), ensure_ascii=False)


async def _redrawn(bot: Bot, count: int) -> None:
    await bot.slack.wait_for("chat.update", count=count)
    await bot.settle()


async def _audit(bot: Bot, event: str) -> list[dict[str, Any]]:
    return [dict(a.details) for a in await bot.deps.store.audit_rows() if a.event == event]


async def _paused(bot: Bot) -> dict[str, Any]:
    bot.llm.reply_tool_calls([("call_1", "run_command", {"command": COMMAND})])
    bot.llm.reply_text("Done.")
    await bot.mention("deploy and drop the db", user=ALICE)
    [card] = await bot.wait_cards(1)
    return card


async def test_the_deploy_approver_alone_leaves_the_drop_db_part_waiting(tmp_path: Any) -> None:
    policy = Policy.from_toml(POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        card = await _paused(bot)
        ledger_id = card["ledger_id"]
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.card_ts is not None
        ts = row.card_ts
        shown = _drawn(bot, ledger_id, ts)
        assert "Every one of these must approve" in shown
        assert "tools.run_command.rules[0] (deploy …)" in shown
        assert "tools.run_command.rules[1] (drop-db …)" in shown
        assert "Allow for" not in json.dumps(
            [b for b in json.loads(shown) if b.get("type") == "actions"]
        )
        assert "several rules must each approve this call" in shown

        await bot.click("opsgate_approve", ledger_id, user=BOB)  # the deploy rule's approver
        await _redrawn(bot, 1)
        assert len(bot.llm.requests) == 1, "one approval toward deploy must not run drop-db"
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "pending" and row.approvals == (BOB,)
        shown = _drawn(bot, ledger_id, ts)
        assert f"1 of 1 (<@{BOB}>)" in shown  # the deploy part is met
        assert f"0 of 2 · 2 more from <@{CAROL}>, <@{DAVE}> or <@{ERIN}>" in shown
        [decision] = await _audit(bot, "decision")
        assert (
            decision["final"] is False and decision["policy_rule"] == "tools.run_command.rules[0]"
        )
        assert [(r["key"], r["approvals"]) for r in decision["requirements"]] == [
            ("tools.run_command.rules[0]", [BOB]),
            ("tools.run_command.rules[1]", []),
        ]

        await bot.click("opsgate_approve", ledger_id, user=FRANK)  # in neither set
        await bot.settle()
        [refusal] = await _audit(bot, "refusal")
        assert refusal["reason"] == "not_an_approver"

        await bot.click("opsgate_approve", ledger_id, user=CAROL)
        await _redrawn(bot, 2)
        assert len(bot.llm.requests) == 1, "one of drop-db's two approvals must not run it"
        assert f"1 of 2 (<@{CAROL}>) · 1 more from" in _drawn(bot, ledger_id, ts)

        await bot.click("opsgate_approve", ledger_id, user=DAVE)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status in ("executing", "done")
        assert set(row.approvals) == {BOB, CAROL, DAVE}
        decisions = await _audit(bot, "decision")
        assert [d["final"] for d in decisions] == [False, False, True]


async def test_a_person_in_both_sets_counts_toward_both(tmp_path: Any) -> None:
    policy = Policy.from_toml(POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        card = await _paused(bot)
        ledger_id = card["ledger_id"]
        await bot.click("opsgate_approve", ledger_id, user=ERIN)  # deploy's and the channel's
        await _redrawn(bot, 1)
        assert len(bot.llm.requests) == 1
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.card_ts is not None and row.status == "pending"
        shown = _drawn(bot, ledger_id, row.card_ts)
        assert f"1 of 1 (<@{ERIN}>)" in shown and f"1 of 2 (<@{ERIN}>)" in shown

        await bot.click("opsgate_approve", ledger_id, user=CAROL)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and set(row.approvals) == {ERIN, CAROL}
