"""When nobody answers, end to end with the Slack stand-in and a fake clock moved by hand:
reminders go once per interval to those who may still decide (never to who decided, never to
the requester); escalation steps add approvers, change the quorum, write to the added people,
show on the card and are audited once each, also across a restart; a freeze holds them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.pagerduty import PagerDutyOncall
from bot.policy import Policy
from bot.slack import user_by_email
from tests.scenarios.test_app import ALICE, make_tools
from tests.support.harness import TEAM, Bot, running_bot
from tests.support.pagerduty import PagerDutyStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import event_body

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def dms(slack: SlackAPIStandIn, user: str) -> list[str]:
    """Direct messages the bot sent `user` (a post whose channel is the user's id)."""
    return [
        str(c.params.get("text", ""))
        for c in slack.calls_to("chat.postMessage")
        if c.ok and c.params.get("channel") == user
    ]


async def tick(bot: Bot, clock: Clock, **span: float) -> None:
    clock.now += timedelta(**span)
    await bot.service.expire_due()
    await bot.settle()  # direct messages go out through the outbox


async def ask(bot: Bot, command: str = "systemctl restart api") -> dict[str, Any]:
    bot.llm.reply_tool_calls([("call_1", "run_command", {"command": command})])
    bot.llm.reply_text("done")
    await bot.mention("please")
    [card] = await bot.wait_cards(1)
    return card


async def events(bot: Bot, name: str) -> list[dict[str, Any]]:
    return [dict(r.details) for r in await bot.deps.store.audit_rows() if r.event == name]


REMIND = f"""
[defaults]
approvers = ["U0ANN", "U0BOB", "{ALICE}"]
required_approvals = 2
allow_self_approval = true
ttl = "1h"
remind_every = "5m"
remind_max = 2
"""


async def test_reminders_once_per_interval_never_to_the_decided(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(REMIND)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        card = await ask(bot)
        await tick(bot, clock, minutes=4, seconds=59)
        assert dms(bot.slack, "U0ANN") == [] and dms(bot.slack, "U0BOB") == []

        await tick(bot, clock, seconds=1)  # 5 minutes
        [first] = dms(bot.slack, "U0ANN")
        assert len(dms(bot.slack, "U0BOB")) == 1
        assert "Reminder" in first and "systemctl restart api" in first
        assert dms(bot.slack, ALICE) == []  # the requester is never reminded
        await tick(bot, clock, minutes=1)  # same interval: nothing more
        assert len(dms(bot.slack, "U0ANN")) == 1

        await bot.click("opsgate_approve", card["ledger_id"], user="U0ANN")
        await bot.settle()
        await tick(bot, clock, minutes=4)  # 10 minutes
        assert len(dms(bot.slack, "U0ANN")) == 1  # decided: no second reminder
        assert len(dms(bot.slack, "U0BOB")) == 2

        await tick(bot, clock, minutes=10)  # remind_max = 2
        assert len(dms(bot.slack, "U0BOB")) == 2
        assert [e["to"] for e in await events(bot, "reminded")] == [
            ["U0ANN", "U0BOB"],
            ["U0BOB"],
        ]
        assert "opsgate_reminders_total 3.0" in bot.metrics.render().decode()


LADDER = """
[defaults]
approvers = ["U0PRIMARY", "U0SPARE"]
required_approvals = 2
ttl = "2h"
escalate = [
  {after = "10m", approvers = ["U0SECOND"]},
  {after = "30m", approvers = ["oncall:boss"], required_approvals = 1},
]

[oncall.boss]
rotation = ["U0BOSSA", "U0BOSSB"]
handoff = "MON 09:00"
timezone = "UTC"
"""


async def test_two_steps_grow_the_approvers_and_lower_the_quorum(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(LADDER)
    boss = policy.oncall["boss"].who(T0 + timedelta(minutes=30))
    assert boss is not None
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        card = await ask(bot)
        ledger_id = card["ledger_id"]
        refused = await bot.click("opsgate_approve", ledger_id, user="U0SECOND")
        assert refused.status_code == 200
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.approvals == ()  # not an approver yet

        await tick(bot, clock, minutes=9)
        assert await events(bot, "escalated") == []
        await tick(bot, clock, minutes=1)  # step 1: U0SECOND is added
        assert [(e["step"], e["added"]) for e in await events(bot, "escalated")] == [
            (1, ["U0SECOND"])
        ]
        [news] = dms(bot.slack, "U0SECOND")
        assert "escalated to you" in news
        drawn = bot.slack.message(row.card_channel or "", row.card_ts or "")
        assert drawn is not None and "escalated to" in str(drawn.get("blocks"))
        await tick(bot, clock, minutes=5)  # nothing new
        assert len(await events(bot, "escalated")) == 1

        await bot.click("opsgate_approve", ledger_id, user="U0SECOND")
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.approvals == ("U0SECOND",) and row.status == "pending"

        await tick(bot, clock, minutes=15)  # 30 minutes: step 2, quorum 1, already met
        assert [e["added"] for e in await events(bot, "escalated")][1] == [boss]
        assert len(dms(bot.slack, boss)) == 1
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "done"
        assert row.approvals == ("U0SECOND",)


async def test_a_step_lowers_the_quorum_at_the_click(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(LADDER)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        card = await ask(bot)
        await tick(bot, clock, minutes=30)  # both steps: the quorum is 1 now
        assert [e["step"] for e in await events(bot, "escalated")] == [1, 2]
        await bot.click("opsgate_approve", card["ledger_id"], user="U0PRIMARY")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done"
        assert row.approvals == ("U0PRIMARY",)  # one approval, where the rule asked two


async def test_a_step_lowering_the_quorum_to_the_approvals_given_approves(
    tmp_path: Path,
) -> None:
    clock = Clock()
    policy = Policy.from_toml(LADDER)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        card = await ask(bot)
        await bot.click("opsgate_approve", card["ledger_id"], user="U0PRIMARY")  # 1 of 2
        await bot.settle()
        await tick(bot, clock, minutes=29)
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "pending" and row.escalation_step == 1
        await tick(bot, clock, minutes=1)  # step 2: the quorum is 1, already given
        await bot.llm.wait_for_requests(2)  # the run resumed without another click
        await bot.settle()
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done" and row.approvals == ("U0PRIMARY",)
        decisions = [dict(r.details) for r in await bot.deps.store.audit_rows()]
        decisions = [d for d in decisions if d.get("decision") == "approved" and d.get("final")]
        assert [(d["step"], d["approved_by"]) for d in decisions] == [(2, ["U0PRIMARY"])]


async def test_a_step_passes_once_across_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(LADDER)
    async with SlackAPIStandIn() as slack:
        async with running_bot(
            tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock, slack=slack
        ) as bot:
            card = await ask(bot)
            await tick(bot, clock, minutes=10)
        async with running_bot(
            tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock, slack=slack
        ) as bot:
            await tick(bot, clock, seconds=1)
            await tick(bot, clock, minutes=19)
            assert [e["step"] for e in await events(bot, "escalated")] == [1]
            assert len(dms(slack, "U0SECOND")) == 1
            await tick(bot, clock, minutes=1)  # 30 minutes: step 2, in the new process
            assert [e["step"] for e in await events(bot, "escalated")] == [1, 2]
            row = await bot.deps.store.get_call(card["ledger_id"])
            assert row is not None and row.escalation_step == 2


async def test_a_freeze_holds_escalation(tmp_path: Path) -> None:
    clock = Clock()
    frozen = LADDER + (
        '\n[[freezes]]\nstart = "2026-12-01T00:00:00Z"\nend = "2026-12-02T00:00:00Z"\n'
        'message = "release"\n'
    )
    policy = Policy.from_toml(frozen)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        await ask(bot)
        await tick(bot, clock, minutes=45)
        assert await events(bot, "escalated") == []
        assert dms(bot.slack, "U0SECOND") == []


ONCALL = """
[defaults]
approvers = ["oncall:primary"]
ttl = "2h"

[oncall.primary]
rotation = ["U0ANNA", "U0BORIS"]
handoff = "TUE 09:30"
timezone = "UTC"
overrides = [{user = "U0DORA", start = "2026-12-01T10:00:00Z", end = "2026-12-01T11:00:00Z"}]
"""


async def test_on_call_is_asked_at_the_click(tmp_path: Path) -> None:
    clock = Clock()  # Tuesday 09:00 UTC: before the handoff
    policy = Policy.from_toml(ONCALL)
    before = policy.oncall["primary"].who(T0)
    after = policy.oncall["primary"].who(T0 + timedelta(minutes=30))
    assert before is not None and after is not None and before != after
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        card = await ask(bot)
        ledger_id = card["ledger_id"]
        clock.now += timedelta(minutes=31)  # handed off
        await bot.click("opsgate_approve", ledger_id, user=before)
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "pending" and row.approvals == ()
        refusals = [r for r in await bot.deps.store.audit_rows() if r.event == "refusal"]
        assert [r.actor for r in refusals] == [before]

        _, hook = await bot.slash("who", user="U0ZED")
        [answer] = await bot.hook_answers(hook)
        assert f"<@{after}>" in str(answer.get("text")) and "oncall:primary" in str(answer)

        await bot.click("opsgate_approve", ledger_id, user=after)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "done" and row.approvals == (after,)


async def test_an_override_decides_while_it_holds(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(ONCALL)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        card = await ask(bot)
        clock.now += timedelta(hours=1, minutes=5)  # 10:05: the override holds
        rotation = policy.oncall["primary"].rotation
        for person in rotation:
            await bot.click("opsgate_approve", card["ledger_id"], user=person)
        await bot.settle()
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.approvals == ()
        await bot.click("opsgate_approve", card["ledger_id"], user="U0DORA")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done" and row.approvals == ("U0DORA",)


PAGED = """
[defaults]
approvers = ["oncall:primary"]
ttl = "2h"

[oncall.primary]
pagerduty_schedule = "PSCHED1"
"""


async def test_pagerduty_on_call_changes_between_card_and_click(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(PAGED)
    async with PagerDutyStandIn() as pd, SlackAPIStandIn() as slack:
        slack.set_user("U0OLD", profile={"email": "old@example.com"})
        slack.set_user("U0NEW", profile={"email": "new@example.com"})
        pd.oncall["PSCHED1"] = "old@example.com"
        settings = {"pagerduty_token": pd.token, "pagerduty_api_url": pd.url}
        async with running_bot(
            tmp_path,
            tools=make_tools(tmp_path),
            policy=policy,
            clock=clock,
            slack=slack,
            settings=settings,
        ) as bot:
            card = await ask(bot)
            assert "U0OLD" in str(card["params"].get("blocks"))
            pd.oncall["PSCHED1"] = "new@example.com"
            clock.now += timedelta(seconds=61)  # the answer is stale: ask PagerDuty again
            paging = bot.deps.paging  # the policy the bot decides with was built with it
            assert isinstance(paging, PagerDutyOncall)
            assert getattr(bot.deps.policy.paged, "__self__", None) is paging
            # What the background refresh does every 20 s:
            web = AsyncWebClient(token="xoxb-test-token", base_url=slack.url)
            await paging.refresh("PSCHED1", user_by_email(web))
            await bot.click("opsgate_approve", card["ledger_id"], user="U0OLD")
            await bot.settle()
            row = await bot.deps.store.get_call(card["ledger_id"])
            assert row is not None and row.approvals == ()
            await bot.click("opsgate_approve", card["ledger_id"], user="U0NEW")
            await bot.llm.wait_for_requests(2)
            await bot.settle()
            row = await bot.deps.store.get_call(card["ledger_id"])
            assert row is not None and row.status == "done" and row.approvals == ("U0NEW",)
            assert pd.requests[0]["schedule_ids[]"] == "PSCHED1"


async def test_the_card_says_why_nobody_is_on_call(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(PAGED)
    async with PagerDutyStandIn() as pd, SlackAPIStandIn() as slack:
        pd.down = True  # from the start: never reached
        settings = {"pagerduty_token": pd.token, "pagerduty_api_url": pd.url}
        async with running_bot(
            tmp_path,
            tools=make_tools(tmp_path),
            policy=policy,
            clock=clock,
            slack=slack,
            settings=settings,
        ) as bot:
            card = await ask(bot)
            shown = str(card["params"].get("blocks"))
            assert "oncall:primary: nobody on call (PagerDuty unreachable since 09:00 UTC)" in shown
            await bot.click("opsgate_approve", card["ledger_id"], user="U0ANY")
            await bot.settle()
            row = await bot.deps.store.get_call(card["ledger_id"])
            assert row is not None and row.status == "pending" and row.approvals == ()


async def _home(bot: Bot, user: str, n: int) -> str:
    """Open `user`'s Home tab; what it shows, as JSON text."""
    body = {
        "type": "event_callback",
        "token": "legacy-verification-token",
        "team_id": TEAM,
        "api_app_id": "ATEST",
        "event_id": f"Ev0LADDER{n}",
        "event_time": 1700000100,
        "event": {
            "type": "app_home_opened",
            "user": user,
            "channel": "D0HOME",
            "tab": "home",
            "event_ts": "1700000100.000100",
        },
    }
    await bot.post(event_body(body), "application/json")
    await bot.settle()
    [*_, last] = [c for c in bot.slack.calls_to("views.publish") if c.params["user_id"] == user]
    view = last.params["view"]
    return view if isinstance(view, str) else json.dumps(view)


async def test_the_home_tab_lists_a_call_once_escalated_to_me(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(LADDER)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        await ask(bot, "systemctl restart billing")
        assert "systemctl restart billing" not in await _home(bot, "U0SECOND", 1)
        await tick(bot, clock, minutes=10)
        shown = await _home(bot, "U0SECOND", 2)
        assert "systemctl restart billing" in shown
        assert f"Waiting since <!date^{int(T0.timestamp())}^" in shown and "({ago})" in shown


DELEGATE = """
[defaults]
approvers = ["U0ONE", "U0ANN"]
required_approvals = 2
ttl = "2h"
"""


async def test_a_delegate_decides_for_the_delegator_counted_once(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(DELEGATE)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        _, hook = await bot.slash("delegate <@U0TWO|two> until 2h on leave", user="U0ONE")
        [answer] = await bot.hook_answers(hook)
        assert "<@U0TWO> decides for you until" in str(answer.get("text"))
        card = await ask(bot)
        ledger_id = card["ledger_id"]

        await bot.click("opsgate_approve", ledger_id, user="U0TWO")  # "U0TWO for U0ONE"
        await bot.click("opsgate_approve", ledger_id, user="U0ONE")  # the same person again
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.approvals == ("U0ONE",) and row.status == "pending"

        await bot.click("opsgate_approve", ledger_id, user="U0ANN")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        decisions = [
            (r.actor, r.details.get("acting_for"))
            for r in await bot.deps.store.audit_rows()
            if r.event == "decision"
        ]
        assert decisions == [("U0TWO", "U0ONE"), ("U0ANN", None)]
        assert [e["delegate"] for e in await events(bot, "delegated")] == ["U0TWO"]

        # The delegation ends by itself.
        clock.now += timedelta(hours=2)
        await bot.service.expire_due()
        assert [e["why"] for e in await events(bot, "delegation_ended")] == ["expired"]


async def test_a_delegate_decides_alone_and_never_their_own_request(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(DELEGATE.replace("required_approvals = 2", "required_approvals = 1"))
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        _, hook = await bot.slash(f"delegate <@{ALICE}> until 1h", user="U0ONE")
        await bot.hook_answers(hook)
        card = await ask(bot)  # ALICE asks
        await bot.click("opsgate_approve", card["ledger_id"], user=ALICE)
        await bot.settle()
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.approvals == () and row.status == "pending"

        _, hook = await bot.slash("delegate off", user="U0ONE")
        [answer] = await bot.hook_answers(hook)
        assert "ended" in str(answer.get("text"))
        _, hook = await bot.slash("delegate <@U0TWO> until 1h", user="U0ONE")
        await bot.hook_answers(hook)
        await bot.click("opsgate_approve", card["ledger_id"], user="U0TWO")
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done" and row.approvals == ("U0ONE",)
        assert [e["why"] for e in await events(bot, "delegation_ended")] == ["off"]


async def test_the_home_tab_lists_what_a_delegate_may_decide(tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy.from_toml(DELEGATE)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        await ask(bot, "systemctl restart payroll")
        assert "systemctl restart payroll" not in await _home(bot, "U0TWO", 11)
        _, hook = await bot.slash("delegate <@U0TWO> until 1h", user="U0ONE")
        await bot.hook_answers(hook)
        shown = await _home(bot, "U0TWO", 12)
        assert "systemctl restart payroll" in shown
        assert "You decide for <@U0ONE> until" in shown
        assert "<@U0TWO> decides for you until" in await _home(bot, "U0ONE", 13)
