"""MCP tool pinning over the Slack harness (real loopback HTTP, signed requests, the LLM
stand-in) with a real stdio MCP server whose tool definition changes between two start-ups
(description, input schema, `readOnlyHint` false -> true), on one SQLite file."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.cli._main import print_pins
from bot.policy import Policy
from bot.store import SQLiteStore
from tests.scenarios.test_app import make_tools
from tests.support.bot_process import bot_process
from tests.support.harness import Bot, running_bot
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

SERVER = str(Path(__file__).parent.parent / "mcp_servers" / "changing_server.py")


def _policy(version: int, log: Path, *, pin: bool = True) -> Policy:
    return Policy.from_toml(
        f"""
[mcp_servers.net]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}]
env = {{ CHANGING_VERSION = "{version}", CHANGING_CALL_LOG = {json.dumps(str(log))} }}
pin = {"true" if pin else "false"}
""",
        source="pins.toml",
    )


async def _audit(bot: Bot, event: str) -> list[dict[str, Any]]:
    return [dict(a.details) for a in await bot.deps.store.audit_rows() if a.event == event]


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def test_a_changed_definition_is_quarantined_until_accepted(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    tools = make_tools(tmp_path)
    async with running_bot(tmp_path, tools=tools, policy=_policy(1, log)) as bot:
        [pinned] = await _audit(bot, "mcp_tool_pinned")
        assert (pinned["server"], pinned["tool"]) == ("net", "lookup")
        assert not bot.deps.tools["net__lookup"].quarantined  # type: ignore[attr-defined]
    async with running_bot(tmp_path, tools=tools, policy=_policy(2, log)) as bot:
        [changed] = await _audit(bot, "mcp_tool_changed")
        assert set(changed["changes"]) == {"description", "input_schema", "annotations"}
        assert changed["changes"]["annotations"]["after"]["read_only"] is True
        assert changed["changes"]["annotations"]["before"]["read_only"] is False
        # Now "read-only" under approval = "annotations", but quarantined: it gets a card.
        bot.llm.reply_tool_calls([("call_1", "net__lookup", {"host": "db1"})])
        await bot.mention("look up db1")
        [card] = await bot.wait_cards(1)
        assert "this tool changed since it was reviewed" in json.dumps(card["params"]["blocks"])
        assert _calls(log) == []
        [gate] = await _audit(bot, "gate")
        assert "quarantined" in gate["rule"]
    async with running_bot(tmp_path, tools=tools, policy=_policy(2, log)) as bot:
        assert bot.deps.tools["net__lookup"].quarantined  # type: ignore[attr-defined]
        assert await _audit(bot, "mcp_tool_changed") == [changed]  # a restart keeps the pins
        [pin] = await bot.deps.store.mcp_pins()
        assert (pin.state, pin.digest) == ("quarantined", pinned["digest"])
        assert pin.listed_digest == changed["listed_digest"]
        store = bot.deps.store
        assert await store.accept_tool_definition("net", "lookup", pin.listed_digest, user_id="U0A")
        assert not await store.accept_tool_definition(
            "net", "lookup", pin.listed_digest, user_id="U0A"
        )
        [accepted] = await _audit(bot, "mcp_tool_accepted")
        assert accepted["digest"] == pin.listed_digest
    out = io.StringIO()
    async with SQLiteStore(tmp_path / "opsgate.db") as reader:
        print_pins(await reader.mcp_pins(), as_json=False, out=out)
    assert out.getvalue() == f"net__lookup  pinned  {pin.listed_digest}\n"
    async with running_bot(tmp_path, tools=tools, policy=_policy(2, log)) as bot:
        assert not bot.deps.tools["net__lookup"].quarantined  # type: ignore[attr-defined]
        bot.llm.reply_tool_calls([("call_1", "net__lookup", {"host": "db2"})])
        bot.llm.reply_text("done")
        await bot.mention("look up db2", ts="1700000999.000100")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert _calls(log) == ["looked up db2"]  # accepted: its annotation now applies


async def test_pin_false_leaves_a_server_unpinned(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    tools = make_tools(tmp_path)
    async with running_bot(tmp_path, tools=tools, policy=_policy(1, log, pin=False)) as bot:
        assert await _audit(bot, "mcp_tool_pinned") == []
    async with SQLiteStore(tmp_path / "opsgate.db") as store:
        assert await store.mcp_pins() == []


REVIEW = """
[mcp]
review_channel = "C0REVIEW"
mcp_admins = ["U0ADMIN"]
"""


def _reviewed(version: int, log: Path) -> Policy:
    return Policy.from_toml(_policy_text(version, log) + REVIEW, source="pins.toml")


def _policy_text(version: int, log: Path) -> str:
    return f"""
[mcp_servers.net]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}]
env = {{ CHANGING_VERSION = "{version}", CHANGING_CALL_LOG = {json.dumps(str(log))} }}
"""


async def test_the_review_card_is_decided_by_an_mcp_admin_only(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    tools = make_tools(tmp_path)
    async with running_bot(tmp_path, tools=tools, policy=_reviewed(1, log)) as bot:
        assert await _audit(bot, "mcp_tool_pinned")
    async with running_bot(tmp_path, tools=tools, policy=_reviewed(2, log)) as bot:
        [post] = await bot.slack.wait_for(
            "chat.postMessage", where=lambda c: c.params.get("channel") == "C0REVIEW"
        )
        shown = json.dumps(post.params["blocks"])
        for words in (
            "description",
            "input_schema",
            "annotations",
            "Accept the new definition",
            "Keep quarantined",
            "also_delete",
        ):
            assert words in shown
        blocks = post.params["blocks"]
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        [accept] = [
            e["value"]
            for b in blocks
            if b["type"] == "actions"
            for e in b["elements"]
            if e["action_id"] == "opsgate_mcp_accept"
        ]
        await bot.click("opsgate_mcp_accept", accept, user="U0MALLORY", channel="C0REVIEW")
        await bot.slack.wait_for("chat.postEphemeral")
        [pin] = await bot.deps.store.mcp_pins()
        assert pin.state == "quarantined" and await _audit(bot, "mcp_tool_accepted") == []
        await bot.click("opsgate_mcp_accept", accept, user="U0ADMIN", channel="C0REVIEW")
        await bot.slack.wait_for("chat.update", where=lambda c: "accepted" in str(c.params))
        [pin] = await bot.deps.store.mcp_pins()
        assert pin.state == "pinned" and pin.accepted_by == "U0ADMIN"
        assert not bot.deps.tools["net__lookup"].quarantined  # type: ignore[attr-defined]
    async with running_bot(tmp_path, tools=tools, policy=_reviewed(2, log)) as bot:
        await bot.settle()
        review = [
            c
            for c in bot.slack.calls_to("chat.postMessage")
            if c.params.get("channel") == "C0REVIEW"
        ]
        assert review == []  # accepted: no card again


async def test_an_mcp_admin_group_is_looked_up_by_the_one_authorisation(tmp_path: Path) -> None:
    """`mcp_admins` naming a user group asks `bot.approvals`, whose cached members every other
    button's check shares: two clicks, one `usergroups.users.list`."""
    log = tmp_path / "calls.log"
    tools = make_tools(tmp_path)
    grouped = REVIEW.replace('["U0ADMIN"]', '["S0MCP"]')
    policy = Policy.from_toml(_policy_text(1, log) + grouped, source="pins.toml")
    async with running_bot(tmp_path, tools=tools, policy=policy) as bot:
        assert await _audit(bot, "mcp_tool_pinned")
    policy = Policy.from_toml(_policy_text(2, log) + grouped, source="pins.toml")
    async with running_bot(tmp_path, tools=tools, policy=policy) as bot:
        bot.slack.set_usergroup_members("S0MCP", ["U0ADMIN"])
        [post] = await bot.slack.wait_for(
            "chat.postMessage", where=lambda c: c.params.get("channel") == "C0REVIEW"
        )
        blocks = post.params["blocks"]
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        [accept] = [
            e["value"]
            for b in blocks
            if b["type"] == "actions"
            for e in b["elements"]
            if e["action_id"] == "opsgate_mcp_accept"
        ]
        await bot.click("opsgate_mcp_accept", accept, user="U0MALLORY", channel="C0REVIEW")
        [refused] = await bot.slack.wait_for("chat.postEphemeral")
        assert "Only the MCP admins" in refused.params["text"]
        await bot.click("opsgate_mcp_accept", accept, user="U0ADMIN", channel="C0REVIEW")
        await bot.slack.wait_for("chat.update", where=lambda c: "accepted" in str(c.params))
        [pin] = await bot.deps.store.mcp_pins()
        assert pin.state == "pinned" and pin.accepted_by == "U0ADMIN"
        assert len(bot.slack.calls_to("usergroups.users.list")) == 1


def _swapping(log: Path) -> Policy:
    """A server that lists version 2 of `lookup` once its first call is answered, and says so
    while it runs; its calls run without a card until then (`approval = "never"`)."""
    return Policy.from_toml(
        f"""
[mcp_servers.net]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}]
approval = "never"
env = {{ CHANGING_SWAP_AFTER_CALL = "1", CHANGING_CALL_LOG = {json.dumps(str(log))} }}
"""
        + REVIEW,
        source="pins.toml",
    )


async def test_a_definition_changed_while_running_is_quarantined_at_once(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=_swapping(log)) as bot:
        lookup = bot.deps.tools["net__lookup"]
        bot.llm.reply_tool_calls([("call_1", "net__lookup", {"host": "db1"})])
        bot.llm.reply_text("done")
        await bot.mention("look up db1")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert _calls(log) == ["looked up db1"]  # as reviewed: it ran without a card
        # The server now lists another definition and says so: the pins are checked again
        # while the bot runs, and the review card goes out without a restart.
        [post] = await bot.slack.wait_for(
            "chat.postMessage", where=lambda c: c.params.get("channel") == "C0REVIEW", timeout=30
        )
        assert "also_delete" in json.dumps(post.params["blocks"])
        assert lookup.quarantined  # type: ignore[attr-defined]
        [changed] = await _audit(bot, "mcp_tool_changed")
        assert set(changed["changes"]) == {"description", "input_schema", "annotations"}
        bot.llm.reply_tool_calls([("call_2", "net__lookup", {"host": "db2"})])
        await bot.mention("look up db2", ts="1700000999.000100")
        [card] = await bot.wait_cards(1)
        assert "this tool changed since it was reviewed" in json.dumps(card["params"]["blocks"])
        assert _calls(log) == ["looked up db1"]


@pytest.mark.processes
async def test_without_a_review_channel_readyz_tells_of_the_quarantine(tmp_path: Path) -> None:
    """`opsgate run --http`: with no `[mcp] review_channel`, `/readyz` names the quarantined
    tool in its notes and the bot stays ready (its calls already wait for a person)."""
    log, policy = tmp_path / "calls.log", tmp_path / "policy.toml"
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack, httpx.AsyncClient() as http:
        for version in (1, 2):
            policy.write_text(_policy_text(version, log))
            async with bot_process(tmp_path, llm, slack, OPSGATE_POLICY=str(policy)) as bot:
                ready = await http.get(f"{bot.url}/readyz", timeout=10)
                assert ready.status_code == 200, ready.text
                body = ready.json()
                assert body["ready"] is True
                if version == 1:
                    assert "notes" not in body  # pinned, nothing to tell
        [note] = body["notes"]
        assert note.startswith("mcp: MCP tool net__lookup changed since it was reviewed")
        assert "quarantined" in note
