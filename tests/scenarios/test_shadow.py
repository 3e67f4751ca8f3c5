"""The shadow policy end to end: signed requests into the real Bolt app, the Slack Web API and LLM
stand-ins, real commands and the real SQLite file. The shadow judges every live call; its
differences are counted and audited and the live decisions stay the live policy's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.policy import Policy, PolicyError
from tests.scenarios.test_app import ALICE, BOB, make_tools, tool_messages
from tests.support.harness import Bot, running_bot

LIVE = """
[tools.run_command]
approval = "rules"
[[tools.run_command.rules]]
prefix = ["echo"]
approval = "never"
[[tools.run_command.rules]]
prefix = ["rm"]
"""

SHADOW = """
[tools.run_command]
approval = "rules"
[[tools.run_command.rules]]
prefix = ["echo"]
[[tools.run_command.rules]]
prefix = ["rm"]
approval = "never"
"""


async def _audit(bot: Bot, event: str) -> list[dict[str, Any]]:
    return [dict(a.details) for a in await bot.deps.store.audit_rows() if a.event == event]


def _metric(bot: Bot, direction: str, rule: str) -> float | None:
    value = bot.metrics.registry.get_sample_value(
        "opsgate_shadow_differences_total", {"direction": direction, "rule": rule}
    )
    return value


async def _run(bot: Bot) -> None:
    bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo shadowed"})])
    bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "rm -f gone.txt"})])
    await bot.mention("tidy up", user=ALICE)


async def test_a_call_the_shadow_judges_otherwise_is_counted_and_audited(tmp_path: Path) -> None:
    shadow = tmp_path / "next.toml"
    shadow.write_text(SHADOW)
    (tmp_path / "gone.txt").write_text("x")
    settings = {"opsgate_shadow_policy": shadow}
    async with running_bot(
        tmp_path, tools=make_tools(tmp_path), policy=Policy.from_toml(LIVE), settings=settings
    ) as bot:
        await _run(bot)
        [card] = await bot.wait_cards(1)  # echo ran freely, rm waits: the live policy's say
        [ran] = tool_messages(bot.llm.requests[1])
        assert "shadowed" in ran["content"]
        assert (tmp_path / "gone.txt").exists()
        rows = await _audit(bot, "shadow_differs")
        assert [(r["direction"], r["tool"]) for r in rows] == [
            ("tighter", "run_command"),
            ("looser", "run_command"),
        ]
        assert rows[0]["live"]["verdict"] == "free"
        assert rows[0]["shadow"] == {
            "verdict": "approval",
            "rule": "tools.run_command.rules[0]",
            "approvers": ["anyone"],
            "required": 1,
        }
        assert (rows[1]["live"]["verdict"], rows[1]["shadow"]["verdict"]) == ("approval", "free")
        assert rows[1]["shadow_policy"] == str(shadow)
        assert _metric(bot, "tighter", "tools.run_command.rules[0]") == 1.0
        assert _metric(bot, "looser", "tools.run_command.rules[1]") == 1.0
        [gate] = await _audit(bot, "gate")  # the live gate row: the live rule, unchanged
        assert gate["policy_rule"] == "tools.run_command.rules[1]"
        await bot.click("opsgate_reject", card["ledger_id"], user=BOB)
        assert (tmp_path / "gone.txt").exists()  # the shadow's "never" ran nothing


async def test_without_a_shadow_nothing_is_counted(tmp_path: Path) -> None:
    async with running_bot(
        tmp_path, tools=make_tools(tmp_path), policy=Policy.from_toml(LIVE)
    ) as bot:
        await _run(bot)
        await bot.wait_cards(1)
        assert await _audit(bot, "shadow_differs") == []
        assert _metric(bot, "looser", "tools.run_command.rules[1]") is None


async def test_the_policy_files_shadow_section_names_it_and_must_load(tmp_path: Path) -> None:
    (tmp_path / "next.toml").write_text(SHADOW.replace('approval = "never"', "aproval = 1"))
    live = tmp_path / "opsgate.toml"
    live.write_text(LIVE + '\n[shadow]\npolicy = "next.toml"\n')
    policy = Policy.load(live)
    assert policy.shadow_path == tmp_path / "next.toml"
    with pytest.raises(PolicyError, match="aproval"):
        async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy):
            pass
