"""Who is acting, checked the same way on every path, through the real app over loopback HTTP:
`cancel` written in a thread is authorised exactly as the Cancel run button, a click that does
not say which workspace the clicker belongs to is refused, a replayed `/opsgate` request starts
no second run, and refusals are audited with the ledger ids they concern."""

from __future__ import annotations

from pathlib import Path

from bot.policy import Policy
from bot.slack.listeners.commands import invocation_key
from tests.scenarios.test_app import ALICE, BOB, make_tools
from tests.support.harness import CHANNEL, SECRET, TEAM, Bot, running_bot
from tests.support.slack_requests import block_actions, interaction_body, sign, slash_command

GUEST = "U0GUEST9"
PARTNER = "T0PARTNER"


async def paused(bot: Bot) -> tuple[str, str]:
    """A run of ALICE's paused on one gated call; returns the thread root and the ledger id."""
    bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi"})])
    root = await bot.mention("run echo", user=ALICE)
    [card] = await bot.wait_cards(1)
    return root, str(card["ledger_id"])


async def state_of(bot: Bot, root: str) -> str:
    session = await bot.deps.store.find_session(TEAM, CHANNEL, root)
    assert session is not None
    return session.state


async def test_a_guest_cannot_cancel_by_writing_cancel_as_with_the_button(tmp_path: Path) -> None:
    # No approver list: "anyone in the channel" means anyone of the session's workspace.
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        root, ledger_id = await paused(bot)
        await bot.click("opsgate_cancel", ledger_id, user=GUEST, team=PARTNER)
        await bot.settle()
        await bot.message("cancel", user=GUEST, thread_ts=root, user_team=PARTNER)
        await bot.settle()
        assert await state_of(bot, root) == "awaiting_approval"
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "pending"
        told = [c.params for c in bot.slack.calls_to("chat.postEphemeral")]
        assert [t["user"] for t in told] == [GUEST, GUEST]
        assert told[0]["text"] == told[1]["text"]  # the same refusal, whichever way asked
        assert "Only members of this workspace" in told[1]["text"]
        refusals = [a for a in await bot.deps.store.audit_rows() if a.event == "refusal"]
        assert [(a.details["via"], a.details["why"]) for a in refusals] == [
            ("button", "other_workspace"),
            ("message", "other_workspace"),
        ]
        assert all(a.details["ledger_ids"] == [ledger_id] for a in refusals)

        # A member of the workspace still may.
        await bot.message("cancel", user=BOB, thread_ts=root)
        await bot.settle()
        assert await state_of(bot, root) == "idle"


async def test_a_click_that_hides_its_workspace_is_refused(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        _, ledger_id = await paused(bot)
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.card_ts
        payload = block_actions(
            "opsgate_approve", ledger_id, user=BOB, channel=CHANNEL, message_ts=row.card_ts
        )
        del payload["team"]
        payload["user"].pop("team_id", None)
        payload["message"].pop("team", None)
        response = await bot.post(interaction_body(payload), "application/x-www-form-urlencoded")
        assert response.status_code == 200
        await bot.settle()
        after = await bot.deps.store.get_call(ledger_id)
        assert after is not None and after.status == "pending" and after.approvals == ()
        assert len(bot.llm.requests) == 1  # nothing resumed
        [told] = bot.slack.calls_to("chat.postEphemeral")
        assert "did not say which workspace" in told.params["text"]
        [refusal] = [a for a in await bot.deps.store.audit_rows() if a.event == "refusal"]
        assert refusal.details["reason"] == "unknown_workspace"
        assert refusal.details["ledger_id"] == ledger_id


async def test_a_replayed_slash_request_starts_one_run(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Checked.")
        body = slash_command(
            "check the pool", user=ALICE, channel=CHANNEL, team=TEAM, trigger_id="123.456.abc"
        )
        headers = sign(SECRET, body)  # one signature, valid for five minutes
        for _ in range(3):
            response = await bot.post(body, "application/x-www-form-urlencoded", **headers)
            assert response.status_code == 200
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        roots = [c for c in bot.slack.calls_to("chat.postMessage") if "asked:" in str(c.params)]
        assert len(roots) == 1
        assert len(bot.llm.requests) == 1


def test_a_slash_invocation_is_named_by_its_trigger_or_its_hook() -> None:
    assert invocation_key({"team_id": "T1", "trigger_id": "9.8"}) == "slash:T1:trigger:9.8"
    assert invocation_key({"team_id": "T1", "response_url": "https://h/1"}) == (
        "slash:T1:hook:https://h/1"
    )
    assert invocation_key({"team_id": "T1"}) is None


async def test_refusal_of_an_unlisted_approver_is_audited_with_its_ledger_id(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(f'[defaults]\napprovers = ["{BOB}"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        _, ledger_id = await paused(bot)
        await bot.click("opsgate_approve", ledger_id, user="U0DAVE")
        await bot.settle()
        [refusal] = [a for a in await bot.deps.store.audit_rows() if a.event == "refusal"]
        assert refusal.details["ledger_id"] == ledger_id
        assert refusal.details["reason"] == "not_an_approver"
