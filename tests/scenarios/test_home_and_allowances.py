"""The Home tab and allowances end to end (signed requests into the Bolt app, the Slack Web API
stand-in, the LLM stand-in, a real SQLite file): `/opsgate allowances` and Revoke, Reject and
Edit from the Home tab, Home tabs republished for the people a decision affects, a stale
Approve from a card drawn before an edit, and the shortcut in a thread awaiting approval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.policy import Policy
from bot.slack.ids import ACTION_FIELD, ACTION_REASON, BLOCK_REASON, CALLBACK_EDIT, CALLBACK_REJECT
from tests.scenarios.test_app import ALICE, BOB, CAROL, make_tools, tool_messages
from tests.scenarios.test_edits_and_allowances import ALLOW_POLICY, _buttons, _message_action, _view
from tests.support.harness import CHANNEL, TEAM, Bot, running_bot
from tests.support.slack_requests import (
    block_actions,
    event_body,
    interaction_body,
    view_submission,
)

DAVE = "U0DAVE"
APPROVERS = f'[defaults]\napprovers = ["{BOB}", "{CAROL}"]\n'


def _ephemerals(bot: Bot, user: str) -> list[str]:
    return [
        str(c.params.get("text"))
        for c in bot.slack.calls_to("chat.postEphemeral")
        if c.params.get("user") == user
    ]


def _homes(bot: Bot, user: str) -> list[dict[str, Any]]:
    return [_view(c) for c in bot.slack.calls_to("views.publish") if c.params["user_id"] == user]


async def _open_home(bot: Bot, user: str, n: int) -> dict[str, Any]:
    body = {
        "type": "event_callback",
        "token": "legacy-verification-token",
        "team_id": TEAM,
        "api_app_id": "ATEST",
        "event_id": f"Ev0HOMEOPEN{n}",
        "event_time": 1700000100,
        "event": {
            "type": "app_home_opened",
            "user": user,
            "channel": "D0HOME",
            "tab": "home",
            "event_ts": f"1700000100.00010{n}",
        },
    }
    await bot.post(event_body(body), "application/json")
    await bot.settle(runs=False)
    return _homes(bot, user)[-1]


def _home_click(action_id: str, value: str, user: str, home: dict[str, Any]) -> bytes:
    """A click on a Home tab button: container type `view`, no channel, no message."""
    [block_id] = [
        b["block_id"]
        for b in home["blocks"]
        if b.get("type") == "actions"
        and any(e.get("action_id") == action_id and e.get("value") == value for e in b["elements"])
    ]
    payload = block_actions(
        action_id, value, user=user, channel=CHANNEL, message_ts="0", block_id=block_id
    )
    payload.pop("channel")
    payload.pop("message")
    payload["container"] = {"type": "view", "view_id": f"VHOME{user}"}
    payload["view"] = home
    return interaction_body(payload)


# -- /opsgate allowances and Revoke -----------------------------------------------------------


async def _granted(bot: Bot) -> str:
    bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi one"})])
    bot.llm.reply_text("Done.")
    await bot.mention("first", user=ALICE, ts="1700000001.000100")
    [card] = await bot.wait_cards(1)
    await bot.click("opsgate_allow", card["ledger_id"], user=BOB)
    await bot.llm.wait_for_requests(2)
    await bot.settle()
    [allowance] = await bot.deps.store.active_allowances()
    return allowance.id


def _revoke_from_list(bot: Bot, allowance_id: str, user: str, hook: str) -> bytes:
    """A Revoke click on the ephemeral `/opsgate allowances` answer (no `message`)."""
    payload = block_actions(
        "opsgate_revoke", allowance_id, user=user, channel=CHANNEL, message_ts="1700000090.0001"
    )
    payload.pop("message")
    payload["container"]["is_ephemeral"] = True
    payload["response_url"] = bot.slack.response_url(hook)
    return interaction_body(payload)


async def test_allowances_are_listed_and_revoked_by_those_who_may_once(tmp_path: Path) -> None:
    policy = Policy.from_toml(APPROVERS + ALLOW_POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        allowance_id = await _granted(bot)
        _, hook = await bot.slash("allowances", user=DAVE)
        [listed] = await bot.hook_answers(hook)
        assert f"allowance `{allowance_id}`" in listed["text"] and f"<@{BOB}>" in listed["text"]
        revoke = [
            e
            for b in listed["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
            if e["action_id"] == "opsgate_revoke"
        ]
        assert [e["value"] for e in revoke] == [allowance_id]

        # Dave is neither its granter nor an approver of the channel.
        await bot.post(_revoke_from_list(bot, allowance_id, DAVE, "r1"), _FORM)
        [refused] = await bot.hook_answers("r1")
        assert "Nothing revoked" in refused["text"]
        assert len(await bot.deps.store.active_allowances()) == 1
        # Carol approves there: she may. A second click finds it ended.
        await bot.post(_revoke_from_list(bot, allowance_id, CAROL, "r2"), _FORM)
        [revoked] = await bot.hook_answers("r2")
        assert f"<@{CAROL}> revoked allowance `{allowance_id}`" in revoked["text"]
        await bot.post(_revoke_from_list(bot, allowance_id, BOB, "r3"), _FORM)
        [twice] = await bot.hook_answers("r3")
        assert "already ended" in twice["text"]
        audit = await bot.deps.store.audit_rows()
        assert [a.actor for a in audit if a.event == "allowance_revoked"] == [CAROL]

        # The same command now needs a card again.
        bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "echo hi two"})])
        await bot.mention("second", user=CAROL, ts="1700000002.000100")
        await bot.wait_cards(2)
        assert not [a for a in await bot.deps.store.audit_rows() if a.event == "allowance_used"]


_FORM = "application/x-www-form-urlencoded"


# -- the Home tab ------------------------------------------------------------------------------


async def test_reject_and_edit_work_from_the_home_tab(tmp_path: Path) -> None:
    policy = Policy.from_toml(APPROVERS)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo one"})])
        bot.llm.reply_text("Rejected, fine.")
        bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "echo two"})])
        bot.llm.reply_text("Done.")
        await bot.mention("first", user=ALICE, ts="1700000001.000100")
        [first] = await bot.wait_cards(1)
        home = await _open_home(bot, BOB, 1)

        # Reject from the Home tab opens the reason form; submitting it reaches the model.
        await bot.post(_home_click("opsgate_reject", first["ledger_id"], BOB, home), _FORM)
        [opened] = await bot.slack.wait_for("views.open")
        assert _view(opened)["private_metadata"] == first["ledger_id"]
        values = {BLOCK_REASON: {ACTION_REASON: {"type": "plain_text_input", "value": "no"}}}
        payload = view_submission(CALLBACK_REJECT, first["ledger_id"], values, user=BOB)
        await bot.post(interaction_body(payload), _FORM)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [rejected] = tool_messages(bot.llm.requests[1])
        assert rejected["content"].startswith("Rejected: no")

        # Edit from the Home tab opens the prefilled form; the edited command runs.
        await bot.mention("second", user=ALICE, ts="1700000002.000100")
        [_, second] = await bot.wait_cards(2)
        home = await _open_home(bot, BOB, 2)
        await bot.post(_home_click("opsgate_edit", second["ledger_id"], BOB, home), _FORM)
        [_, edit_form] = await bot.slack.wait_for("views.open", count=2)
        [field] = [b for b in _view(edit_form)["blocks"] if b["type"] == "input"]
        assert field["element"]["initial_value"] == "echo two"
        edited = {"command": {ACTION_FIELD: "echo edited-at-home"}}
        payload = view_submission(CALLBACK_EDIT, second["ledger_id"], edited, user=BOB)
        await bot.post(interaction_body(payload), _FORM)
        await bot.llm.wait_for_requests(4)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[3])
        assert "edited by a human" in result["content"]
        assert "edited-at-home" in result["content"].split("Result:")[1]


async def test_a_decision_republishes_the_home_tabs_of_the_people_it_affects(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(APPROVERS)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo shared"})])
        bot.llm.reply_text("Done.")
        await bot.mention("run", user=ALICE)
        [card] = await bot.wait_cards(1)
        for n, user in enumerate((ALICE, CAROL, DAVE)):
            before = await _open_home(bot, user, n)
        assert "echo shared" not in json.dumps(before["blocks"])  # Dave may not decide it
        assert "Approve" in _buttons(_homes(bot, CAROL)[-1]["blocks"])
        assert "echo shared" in json.dumps(_homes(bot, ALICE)[-1]["blocks"])
        counts = {u: len(_homes(bot, u)) for u in (ALICE, CAROL, DAVE)}

        # Bob approves on the card in the channel: Alice (the requester) and Carol (an
        # approver) get their Home tabs republished without the call; Dave's is left alone.
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert len(_homes(bot, DAVE)) == counts[DAVE]
        for user in (ALICE, CAROL):
            assert len(_homes(bot, user)) == counts[user] + 1
            assert "echo shared" not in json.dumps(_homes(bot, user)[-1]["blocks"])


async def test_a_card_click_publishes_no_home_tab_for_people_who_never_opened_it(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(APPROVERS)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        for n in (1, 2):
            bot.llm.reply_tool_calls([(f"call_{n}", "run_command", {"command": f"echo {n}"})])
        bot.llm.reply_text("Done.")
        bot.llm.reply_text("Done.")
        await bot.mention("first", user=ALICE, ts="1700000001.000100")
        await bot.wait_cards(1)
        await bot.mention("second", user=ALICE, ts="1700000002.000100")
        first, second = await bot.wait_cards(2)

        # Nobody opened the Home tab: Bob's click in the channel publishes none (his is
        # drawn when he opens it).
        await bot.click("opsgate_approve", first["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(3)
        await bot.settle()
        assert bot.slack.calls_to("views.publish") == []

        # Once he opened it, his next click in the channel republishes it, without the call.
        await _open_home(bot, BOB, 1)
        assert "echo 2" in json.dumps(_homes(bot, BOB)[-1]["blocks"])
        await bot.click("opsgate_approve", second["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(4)
        await bot.settle()
        assert len(_homes(bot, BOB)) == 2
        assert "echo 2" not in json.dumps(_homes(bot, BOB)[-1]["blocks"])
        assert _homes(bot, ALICE) == []


# -- a stale Approve ---------------------------------------------------------------------------


async def test_an_approve_from_the_card_drawn_before_an_edit_does_not_count(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml("[defaults]\nrequired_approvals = 2\n")
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo before"})])
        bot.llm.reply_text("Done.")
        await bot.mention("run", user=ALICE)
        [card] = await bot.wait_cards(1)
        ledger_id = card["ledger_id"]
        blocks = card["params"]["blocks"]
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        [old_block] = [b["block_id"] for b in blocks if b["type"] == "actions"]

        edited = {"command": {ACTION_FIELD: "echo after"}}
        payload = view_submission(CALLBACK_EDIT, ledger_id, edited, user=CAROL)
        await bot.post(interaction_body(payload), _FORM)
        await bot.settle()
        updates = len(bot.slack.calls_to("chat.update"))

        # Bob's click comes from the card as it was drawn before Carol's edit.
        await bot.click("opsgate_approve", ledger_id, user=BOB, block_id=old_block)
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "pending" and row.approvals == (CAROL,)
        assert len(bot.llm.requests) == 1
        assert any(
            "arguments changed since this card was drawn" in t for t in _ephemerals(bot, BOB)
        )
        assert len(bot.slack.calls_to("chat.update")) > updates  # redrawn
        refusals = [a for a in await bot.deps.store.audit_rows() if a.event == "refusal"]
        assert [r.details.get("why") for r in refusals] == ["arguments_changed"]

        # The same click on the card as drawn now counts, and the edited command runs.
        await bot.click("opsgate_approve", ledger_id, user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert "after" in result["content"].split("Result:")[1]


# -- the shortcut ------------------------------------------------------------------------------


async def test_the_shortcut_in_a_thread_awaiting_approval_answers_as_a_message_would(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo waiting"})])
        root = await bot.mention("run", user=ALICE, ts="1700000050.000100")
        await bot.wait_cards(1)
        message = {
            "type": "message",
            "user": ALICE,
            "ts": "1700000060.000100",
            "thread_ts": root,
            "text": "and this?",
        }
        await bot.post(interaction_body(_message_action(CAROL, message)), _FORM)
        await bot.settle()
        assert len(bot.llm.requests) == 1  # no second run in the paused thread
        session = await bot.deps.store.find_session(TEAM, CHANNEL, root)
        assert session is not None and session.state == "awaiting_approval"
        # What a message in that thread gets: a pointer to the pending card.
        by_message = await bot.message("and by message?", user=CAROL, thread_ts=root)
        await bot.settle()
        assert by_message is not None
        said = [str(c.params.get("text")) for c in bot.slack.calls_to("chat.postEphemeral")]
        said += [str(c.params.get("text")) for c in bot.slack.calls_to("chat.postMessage")]
        pointers = [t for t in said if "This thread is waiting for a decision" in t]
        assert len(pointers) >= 2, said


# -- "anyone in the channel" calls on members' Home tabs ---------------------------------------


def _membership_event(kind: str, user: str, n: int) -> bytes:
    """`member_joined_channel` / `member_left_channel` as Slack sends them (Events API)."""
    body = {
        "type": "event_callback",
        "token": "legacy-verification-token",
        "team_id": TEAM,
        "api_app_id": "ATEST",
        "event_id": f"Ev0MEMBER{n}",
        "event_time": 1700000200,
        "event": {
            "type": kind,
            "user": user,
            "channel": CHANNEL,
            "channel_type": "C",
            "team": TEAM,
            "event_ts": f"1700000200.00020{n}",
        },
    }
    return event_body(body)


async def test_calls_where_anyone_approves_are_on_the_home_tabs_of_the_channels_members(
    tmp_path: Path,
) -> None:
    # The default policy: anyone in the channel but the requester approves.
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.slack.set_channel_members(CHANNEL, [ALICE, BOB, CAROL])  # two pages of members
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo members"})])
        bot.llm.reply_text("Done.")
        await bot.mention("run", user=ALICE)
        [card] = await bot.wait_cards(1)

        bob = await _open_home(bot, BOB, 1)
        assert "echo members" in json.dumps(bob["blocks"])
        assert "Approve" in _buttons(bob["blocks"])
        dave = await _open_home(bot, DAVE, 2)  # not in the channel
        assert "echo members" not in json.dumps(dave["blocks"])

        # Bob leaves: the event drops the cached member list, and his tab no longer lists it.
        bot.slack.set_channel_members(CHANNEL, [ALICE, CAROL])
        await bot.post(_membership_event("member_left_channel", BOB, 1), "application/json")
        await bot.settle(runs=False)
        assert "echo members" not in json.dumps((await _open_home(bot, BOB, 3))["blocks"])

        # Dave joins: his tab lists it now, and Carol's approval republishes it without it.
        bot.slack.set_channel_members(CHANNEL, [ALICE, CAROL, DAVE])
        await bot.post(_membership_event("member_joined_channel", DAVE, 2), "application/json")
        await bot.settle(runs=False)
        assert "echo members" in json.dumps((await _open_home(bot, DAVE, 4))["blocks"])
        published = len(_homes(bot, DAVE))
        await bot.click("opsgate_approve", card["ledger_id"], user=CAROL)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert len(_homes(bot, DAVE)) == published + 1
        assert "echo members" not in json.dumps(_homes(bot, DAVE)[-1]["blocks"])
        assert "echo members" not in json.dumps(_homes(bot, BOB)[-1]["blocks"])


async def test_a_failed_member_lookup_lists_nothing_where_anyone_approves(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        # No member list: conversations.members answers channel_not_found.
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo unknown"})])
        await bot.mention("run", user=ALICE)
        await bot.wait_cards(1)
        bob = await _open_home(bot, BOB, 1)
        assert "echo unknown" not in json.dumps(bob["blocks"])
        assert bot.slack.calls_to("conversations.members")
