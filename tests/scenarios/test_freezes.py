"""Change freezes and break-glass through the real app over signed loopback HTTP: a
scheduled freeze on an injected clock blocks Approve and allowances and is lifted at its end
(cards redrawn with their buttons); `/opsgate freeze` is for freeze admins only; break-glass
by a listed person runs the call, posts the notice and leaves a review item the breaker cannot
close and another approver can."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bot.policy import Policy
from bot.slack.home import home_view
from bot.slack.ids import (
    ACTION_ALLOW,
    ACTION_APPROVE,
    ACTION_BREAK_GLASS,
    ACTION_EDIT,
    ACTION_GLASS_REASON,
    ACTION_REVIEWED,
    BLOCK_GLASS_REASON,
    CALLBACK_BREAK_GLASS,
)
from tests.scenarios.test_app import ALICE, BOB, CAROL, make_tools, tool_messages
from tests.support.harness import CHANNEL, Bot, running_bot
from tests.support.slack_requests import interaction_body, view_submission

DAVE = "U0DAVE"
FORM = "application/x-www-form-urlencoded"


class Clock:
    """Moved by hand: Friday 4 December 2026, 16:50 UTC, ten minutes before the freeze; and on
    by the seconds that pass, as the outbox's writes that settle (a republished Home tab) are
    due a few seconds after they were owed."""

    def __init__(self) -> None:
        self._set, self._at = datetime(2026, 12, 4, 16, 50, tzinfo=UTC), time.monotonic()

    @property
    def now(self) -> datetime:
        return self._set + timedelta(seconds=time.monotonic() - self._at)

    @now.setter
    def now(self, moment: datetime) -> None:
        self._set, self._at = moment, time.monotonic()

    def __call__(self) -> datetime:
        return self.now


FRIDAY_POLICY = f"""
[defaults]
approvers = ["{BOB}", "{CAROL}"]
ttl = "6h"

[tools.run_command]
approval = "rules"
allow_for = "1h"
[[tools.run_command.rules]]
prefix = ["echo"]
allow_prefix = ["echo"]

[[freezes]]
schedule = "0 17 * * 5"
duration = "1h"
channels = ["{CHANNEL}"]
message = "Friday evening: no changes"
"""


def _buttons(blocks: list[dict[str, Any]]) -> list[str]:
    return [
        str(e.get("action_id"))
        for b in blocks
        if b.get("type") == "actions"
        for e in b.get("elements", [])
    ]


def _drawn(bot: Bot, row_channel: str | None, ts: str | None) -> list[dict[str, Any]]:
    assert row_channel and ts
    message = bot.slack.message(row_channel, ts)
    assert message is not None
    return list(message.get("blocks") or [])


def _top_level(bot: Bot) -> list[str]:
    """What the bot posted at the channel's top level (not in a thread)."""
    return [
        str(c.params.get("text"))
        for c in bot.slack.calls_to("chat.postMessage")
        if not c.params.get("thread_ts") and not c.params.get("blocks")
    ]


async def _paused(bot: Bot, command: str, ts: str, then: str | None = None) -> str:
    bot.llm.reply_tool_calls([(f"call_{ts}", "run_command", {"command": command})])
    if then is not None:  # the answer after a call that is decided at once (forbidden)
        bot.llm.reply_text(then)
    await bot.mention(f"run {command}", user=ALICE, ts=ts)
    card = (await bot.wait_cards(len(bot.cards()) + 1))[-1]
    return str(card["ledger_id"])


async def test_a_scheduled_freeze_blocks_approve_and_allowances_until_it_ends(
    tmp_path: Path,
) -> None:
    clock = Clock()
    policy = Policy.from_toml(FRIDAY_POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        # Before the freeze: BOB allows `echo one` for an hour.
        first = await _paused(bot, "echo one", "1700000001.000100")
        bot.llm.reply_text("Done.")
        await bot.click(ACTION_ALLOW, first, user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert len(await bot.deps.store.active_allowances(now=clock.now)) == 1

        clock.now = datetime(2026, 12, 4, 17, 5, tzinfo=UTC)
        await bot.service.expire_due()
        await bot.service.expire_due()  # a second look announces nothing more
        [started] = [t for t in _top_level(bot) if "Change freeze started" in t]
        assert "freezes[0]" in started and "Friday evening" in started
        events = [a.event for a in await bot.deps.store.audit_rows()]
        assert events.count("freeze_started") == 1

        # The allowance covers nothing now: the same call gets a card, without Approve/Allow.
        ledger_id = await _paused(bot, "echo one", "1700000002.000100")
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None
        blocks = _drawn(bot, row.card_channel, row.card_ts)
        text = json.dumps(blocks)
        assert "Change freeze" in text and "freezes[0]" in text and "Friday evening" in text
        buttons = _buttons(blocks)
        assert ACTION_APPROVE not in buttons and ACTION_ALLOW not in buttons
        assert ACTION_BREAK_GLASS not in buttons  # the policy sets no break_glass
        assert "allowance_used" not in [a.event for a in await bot.deps.store.audit_rows()][-3:]

        await bot.click(ACTION_APPROVE, ledger_id, user=BOB)
        await bot.settle()
        after = await bot.deps.store.get_call(ledger_id)
        assert after is not None and after.status == "pending" and after.approvals == ()
        told = str(bot.slack.calls_to("chat.postEphemeral")[-1].params["text"])
        assert "change freeze freezes[0]" in told
        refusals = [a for a in await bot.deps.store.audit_rows() if a.event == "refusal"]
        assert refusals[-1].details["reason"] == "frozen"
        await bot.click(ACTION_EDIT, ledger_id, user=BOB)  # Edit approves too: refused
        await bot.settle()
        assert not bot.slack.calls_to("views.open")
        home = await bot.service.home.view(BOB, team="T0TEST")
        assert [f.label for f in home.freezes] == ["freezes[0]"]
        assert "Change freezes: freezes[0] (cron '0 17 * * 5' (UTC) for 1h in C0OPS)" in home.policy
        drawn_home = json.dumps(home_view(home))
        assert "Change freezes in force" in drawn_home and "Friday evening" in drawn_home

        # 18:00: the freeze ends; the card gets its buttons back and Approve works.
        clock.now = datetime(2026, 12, 4, 18, 1, tzinfo=UTC)
        await bot.service.expire_due()
        await bot.service.expire_due()
        [ended] = [t for t in _top_level(bot) if "Change freeze ended" in t]
        assert "freezes[0]" in ended
        events = [a.event for a in await bot.deps.store.audit_rows()]
        assert events.count("freeze_ended") == 1
        # The redraw is the outbox's to send: wait for it, not for a moment.
        await bot.slack.wait_for(
            "chat.update", where=lambda c: ACTION_APPROVE in json.dumps(c.params.get("blocks"))
        )
        assert ACTION_APPROVE in _buttons(_drawn(bot, row.card_channel, row.card_ts))
        bot.llm.reply_text("Ran after the freeze.")
        await bot.click(ACTION_APPROVE, ledger_id, user=BOB)
        await bot.llm.wait_for_requests(4)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[3])
        assert "one" in result["content"]


async def test_only_freeze_admins_freeze_and_unfreeze(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(
        f'[defaults]\napprovers = ["{BOB}"]\nfreeze_admins = ["{CAROL}"]\n'
        '[tools.run_command]\napproval = "always"\n'
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        _, hook = await bot.slash("freeze 2h deploy of the payments stack", user=BOB)
        [answer] = await bot.hook_answers(hook)
        assert "Only the freeze admins" in answer["text"] and "Nothing was frozen" in answer["text"]
        assert await bot.deps.store.ad_hoc_freezes(ending_after=clock.now) == []

        _, hook = await bot.slash("freeze 2h deploy of the payments stack", user=CAROL)
        [answer] = await bot.hook_answers(hook)
        assert "frozen for 2h" in answer["text"]
        [started] = [t for t in _top_level(bot) if "Change freeze started" in t]
        assert "payments stack" in started and f"<@{CAROL}>" in started

        ledger_id = await _paused(bot, "echo frozen", "1700000003.000100")
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None
        assert ACTION_APPROVE not in _buttons(_drawn(bot, row.card_channel, row.card_ts))
        _, hook = await bot.slash("help", user=ALICE)
        [help_answer] = await bot.hook_answers(hook)
        assert "Change freezes in force" in help_answer["text"]
        assert "payments stack" in help_answer["text"]

        _, hook = await bot.slash("unfreeze", user=BOB)
        [answer] = await bot.hook_answers(hook)
        assert "Only the freeze admins" in answer["text"]
        _, hook = await bot.slash("unfreeze", user=CAROL)
        [answer] = await bot.hook_answers(hook)
        assert "Ended 1 ad hoc freeze" in answer["text"]
        await bot.settle()
        assert ACTION_APPROVE in _buttons(_drawn(bot, row.card_channel, row.card_ts))
        events = [a.event for a in await bot.deps.store.audit_rows()]
        assert events.count("freeze_started") == 1 and events.count("freeze_ended") == 1


GLASS_POLICY = f"""
[defaults]
approvers = ["{BOB}", "{CAROL}"]
freeze_admins = ["{CAROL}"]
break_glass_approvers = ["{DAVE}"]

[tools.run_command]
approval = "always"
break_glass = true
"""


async def _break_glass(bot: Bot, ledger_id: str, user: str, reason: str) -> httpx.Response:
    row = await bot.deps.store.get_call(ledger_id)
    assert row is not None
    values = {
        BLOCK_GLASS_REASON: {ACTION_GLASS_REASON: {"type": "plain_text_input", "value": reason}}
    }
    payload = view_submission(
        CALLBACK_BREAK_GLASS, f"{ledger_id} {row.running_digest}", values, user=user
    )
    response = await bot.post(interaction_body(payload), FORM)
    assert response.status_code == 200
    return response


async def test_break_glass_runs_the_call_and_leaves_a_review_item(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(GLASS_POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        _, hook = await bot.slash("freeze 1h incident review", user=CAROL)
        await bot.hook_answers(hook)
        ledger_id = await _paused(bot, "echo glass", "1700000004.000100")
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None
        buttons = _buttons(_drawn(bot, row.card_channel, row.card_ts))
        assert ACTION_BREAK_GLASS in buttons and ACTION_APPROVE not in buttons

        # BOB approves in general, but is no break-glass approver: no form opens.
        await bot.click(ACTION_BREAK_GLASS, ledger_id, user=BOB)
        await bot.settle()
        assert not bot.slack.calls_to("views.open")
        told = str(bot.slack.calls_to("chat.postEphemeral")[-1].params["text"])
        assert f"Only <@{DAVE}> may break glass" in told
        # DAVE is: the form opens, and submitting it with a reason runs the call.
        await bot.click(ACTION_BREAK_GLASS, ledger_id, user=DAVE)
        await bot.settle()
        [opened] = bot.slack.calls_to("views.open")
        assert opened.params["view"]["callback_id"] == CALLBACK_BREAK_GLASS
        no_reason = await _break_glass(bot, ledger_id, DAVE, "   ")
        assert no_reason.json()["response_action"] == "errors"
        still = await bot.deps.store.get_call(ledger_id)
        assert still is not None and still.status == "pending"
        bot.llm.reply_text("Ran under break-glass.")
        await _break_glass(bot, ledger_id, DAVE, "payments down, rollback needed")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [result] = tool_messages(bot.llm.requests[1])
        assert "glass" in result["content"]

        [loud] = [t for t in _top_level(bot) if "BREAK GLASS" in t]
        assert f"<@{DAVE}>" in loud and "payments down, rollback needed" in loud
        [audited] = [a for a in await bot.deps.store.audit_rows() if a.event == "break_glass"]
        assert audited.actor == DAVE
        assert audited.details["reason"] == "payments down, rollback needed"
        # The decision row: the reason, who may decide (`rule`) and the policy rule.
        [decided] = [a for a in await bot.deps.store.audit_rows() if a.event == "decision"]
        assert decided.details["reason"] == "break glass: payments down, rollback needed"
        assert decided.details["rule"] and "policy_rule" in decided.details
        assert decided.actor == DAVE and decided.details["final"] is True
        home = await bot.service.home.view(BOB, team="T0TEST")
        assert [g.ledger_id for g in home.unreviewed] == [ledger_id]
        assert "Break-glass uses to review" in json.dumps(home_view(home))
        assert "Break glass during a freeze (where break_glass is set) by: U0DAVE" in home.policy

        # The decided card keeps "Mark reviewed": not for the breaker, yes for another approver.
        assert ACTION_REVIEWED in _buttons(_drawn(bot, row.card_channel, row.card_ts))
        await bot.click(ACTION_REVIEWED, ledger_id, user=DAVE)
        await bot.settle()
        assert "someone else must review" in str(
            bot.slack.calls_to("chat.postEphemeral")[-1].params
        )
        assert len(await bot.deps.store.unreviewed_break_glass()) == 1
        await bot.click(ACTION_REVIEWED, ledger_id, user=BOB)
        await bot.settle()
        assert await bot.deps.store.unreviewed_break_glass() == []
        events = [a.event for a in await bot.deps.store.audit_rows()]
        assert events.count("break_glass_reviewed") == 1
        assert ACTION_REVIEWED not in _buttons(_drawn(bot, row.card_channel, row.card_ts))
        home = await bot.service.home.view(BOB, team="T0TEST")
        assert home.unreviewed == ()


async def test_a_forbidden_call_offers_no_break_glass_even_when_frozen(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(
        GLASS_POLICY.replace('approval = "always"\nbreak_glass = true', 'approval = "rules"')
        + '[[tools.run_command.rules]]\nprefix = ["rm"]\napproval = "forbidden"\n'
        + '[[tools.run_command.rules]]\nprefix = ["echo"]\nbreak_glass = true\n'
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        _, hook = await bot.slash("freeze 1h incident", user=CAROL)
        await bot.hook_answers(hook)
        ledger_id = await _paused(bot, "rm -rf /srv/x", "1700000005.000100", then="Not run.")
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None
        assert ACTION_BREAK_GLASS not in _buttons(_drawn(bot, row.card_channel, row.card_ts))
        await _break_glass(bot, ledger_id, DAVE, "try anyway")
        await bot.settle()
        assert [a for a in await bot.deps.store.audit_rows() if a.event == "break_glass"] == []
        frozen = await _paused(bot, "echo breakable", "1700000006.000100")
        row = await bot.deps.store.get_call(frozen)
        assert row is not None
        assert ACTION_BREAK_GLASS in _buttons(_drawn(bot, row.card_channel, row.card_ts))


async def test_break_glass_on_a_previewed_call_is_bound_to_its_preview(tmp_path: Path) -> None:
    clock = Clock()
    state = tmp_path / "state.txt"
    state.write_text("replicas: 3\n")
    policy = Policy.from_toml(
        f'[defaults]\napprovers = ["{BOB}"]\nfreeze_admins = ["{CAROL}"]\n'
        f'break_glass_approvers = ["{DAVE}"]\n'
        '[tools.run_command]\napproval = "rules"\n'
        '[[tools.run_command.rules]]\nprefix = ["cat"]\npreview = "cat {operands}"\n'
        "break_glass = true\n"
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        _, hook = await bot.slash("freeze 1h incident", user=CAROL)
        await bot.hook_answers(hook)
        ledger_id = await _paused(bot, f"cat {state}", "1700000005.000100")
        clock.now = datetime(2026, 12, 4, 17, 5, tzinfo=UTC)  # past the preview's 10m
        state.write_text("replicas: 30\n")  # and what it shows has moved
        await _break_glass(bot, ledger_id, DAVE, "outage")
        await bot.settle()
        told = str(bot.slack.calls_to("chat.postEphemeral")[-1].params["text"])
        assert "the preview changed: look again" in told
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "pending"
        assert [a for a in await bot.deps.store.audit_rows() if a.event == "break_glass"] == []
        assert len(bot.llm.requests) == 1, "nothing ran"

        bot.llm.reply_text("Ran under break-glass.")
        # Again, on the redrawn card's fresh preview (another form: another submission).
        await _break_glass(bot, ledger_id, DAVE, "outage, preview read")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [decided] = [a for a in await bot.deps.store.audit_rows() if a.event == "decision"]
        runs = [a for a in await bot.deps.store.audit_rows() if a.event == "preview"]
        assert [r.details["why"] for r in runs] == ["card", "stale"]
        assert decided.details["preview_digest"] == runs[-1].details["digest"]
        assert decided.details["reason"] == "break glass: outage, preview read"
