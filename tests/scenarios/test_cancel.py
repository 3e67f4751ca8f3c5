"""Cancelling a run that waits for approval, by writing `cancel` or clicking "Cancel run",
through the real app over loopback HTTP; and the store's one-winner guarantee against a resume."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.policy import Policy
from bot.slack.mrkdwn import user_mention
from bot.store import CARD_REDRAW, SQLiteStore, Store
from tests.scenarios.test_app import ALICE, BOB, all_text, assert_history_valid, make_tools
from tests.support.harness import CHANNEL, Bot, HeldReplies, cancel_values, running_bot
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

DAVE = "U0DAVE"
POLICY = f'[defaults]\napprovers = ["{BOB}"]\n'

BATCH: list[tuple[str, str, dict[str, Any] | str]] = [
    ("call_a", "run_command", {"command": "echo first"}),
    ("call_b", "echo", {"text": "sibling"}),
    ("call_c", "run_command", {"command": "echo second"}),
]


async def paused(bot: Bot, *, user: str = ALICE) -> tuple[str, list[dict[str, Any]]]:
    """A run paused on two gated calls around a held sibling; returns the root and cards."""
    bot.llm.reply_tool_calls(BATCH)
    root = await bot.mention("two commands and an echo", user=user)
    cards = await bot.wait_cards(2)
    return root, cards


async def assert_cancelled(
    bot: Bot, root: str, by: str, cards: list[dict[str, Any]], *, approved: str = ""
) -> None:
    """The run ended cancelled: nothing ran, the model was not asked again, every card and the
    thread say so, and the stored history answers every call of the batch (a gated call that
    was `approved` but had not run yet is "Not run", like the held sibling)."""
    store = bot.deps.store
    session = await store.find_session("T0TEST", CHANNEL, root)
    assert session is not None and session.state == "idle"
    rows = await store.batch_calls(session.id)
    assert [(r.call_id, r.status) for r in rows] == [
        ("call_a", "cancelled"),
        ("call_b", "cancelled"),
        ("call_c", "cancelled"),
    ]
    assert all(r.decided_by == by and r.reason == f"cancelled by <@{by}>" for r in rows)
    history = await store.load_messages(session.id)
    answers = [(m.tool_call_id, m.content) for m in history if m.role == "tool"]
    rejected, not_run = (
        f"Rejected: cancelled by <@{by}>",
        f"Not run: the run was cancelled by <@{by}>",
    )
    assert answers == [
        ("call_a", not_run if approved == "call_a" else rejected),
        ("call_b", not_run),
        ("call_c", not_run if approved == "call_c" else rejected),
    ]
    assert history[-1].role == "tool"  # no new model turn
    assert len(bot.llm.requests) == 1 and bot.llm.unexpected == []
    for card in cards:
        row = await store.get_call(card["ledger_id"])
        assert row is not None and row.card_ts
        redrawn = [
            c.params for c in bot.slack.calls_to("chat.update") if c.params["ts"] == row.card_ts
        ][-1]
        blocks = json.dumps(redrawn["blocks"])
        assert not any(b["type"] == "actions" for b in redrawn["blocks"])
        assert "Cancelled" in blocks and f"<@{by}>" in blocks
    assert f"Run cancelled by <@{by}>" in all_text(bot)
    cancels = [a for a in await store.audit_rows() if a.event == "cancel"]
    assert sorted(a.call_id or "" for a in cancels) == ["call_a", "call_b", "call_c"]
    assert {a.actor for a in cancels} == {by}


async def test_requester_cancels_by_writing_cancel(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    async with running_bot(
        tmp_path, tools=make_tools(tmp_path), policy=Policy.from_toml(POLICY)
    ) as bot:
        root, cards = await paused(bot)
        await bot.message("Cancel", user=ALICE, thread_ts=root)
        await bot.settle()
        await assert_cancelled(bot, root, ALICE, cards)
        assert not marker.exists()
        assert {
            a.details.get("via") for a in await bot.deps.store.audit_rows() if a.event == "cancel"
        } == {"message"}

        # A click on a cancelled card changes nothing and says why.
        await bot.click("opsgate_approve", cards[0]["ledger_id"], user=BOB)
        await bot.settle()
        assert "already cancelled by" in str(bot.slack.calls_to("chat.postEphemeral")[-1].params)
        assert len(bot.llm.requests) == 1

        # The thread goes on with a history a provider accepts.
        bot.llm.reply_text("Fine, nothing ran. What now?")
        await bot.message("what happened?", user=ALICE, thread_ts=root)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert_history_valid(bot.llm.requests[1])


async def test_an_approver_cancels_with_the_button(tmp_path: Path) -> None:
    async with running_bot(
        tmp_path, tools=make_tools(tmp_path), policy=Policy.from_toml(POLICY)
    ) as bot:
        root, cards = await paused(bot)
        # One approval first: an approved call that has not run is cancelled too.
        await bot.click("opsgate_approve", cards[0]["ledger_id"], user=BOB)
        await bot.settle()
        [value] = cancel_values(cards[1]["params"]["blocks"])
        assert value == cards[1]["ledger_id"]
        response = await bot.click("opsgate_cancel", value, user=BOB)
        assert response.status_code == 200
        await bot.settle()
        approved = await bot.deps.store.get_call(cards[0]["ledger_id"])
        assert approved is not None
        await assert_cancelled(bot, root, BOB, cards, approved=approved.call_id)
        previous = {
            a.call_id: a.details["previous_status"]
            for a in await bot.deps.store.audit_rows()
            if a.event == "cancel"
        }
        assert previous[approved.call_id] == "approved"
        assert {v for k, v in previous.items() if k != approved.call_id} == {"pending"}
        # A second click on the button: nothing more happens.
        await bot.click("opsgate_cancel", value, user=BOB)
        await bot.settle()
        assert "no longer waiting for approval" in str(
            bot.slack.calls_to("chat.postEphemeral")[-1].params["text"]
        )


async def test_someone_else_cannot_cancel(tmp_path: Path) -> None:
    async with running_bot(
        tmp_path, tools=make_tools(tmp_path), policy=Policy.from_toml(POLICY)
    ) as bot:
        root, cards = await paused(bot)
        await bot.message("cancel", user=DAVE, thread_ts=root)
        await bot.settle()
        [refusal] = bot.slack.calls_to("chat.postEphemeral")
        assert refusal.params["user"] == DAVE and refusal.params["thread_ts"] == root
        assert f"<@{ALICE}>" in refusal.params["text"] and f"<@{BOB}>" in refusal.params["text"]
        await bot.click("opsgate_cancel", cards[0]["ledger_id"], user=DAVE)
        await bot.settle()
        assert len(bot.slack.calls_to("chat.postEphemeral")) == 2
        session = await bot.deps.store.find_session("T0TEST", CHANNEL, root)
        assert session is not None and session.state == "awaiting_approval"
        rows = await bot.deps.store.batch_calls(session.id)
        assert all(r.status == "pending" for r in rows)
        refusals = [a for a in await bot.deps.store.audit_rows() if a.event == "refusal"]
        assert [a.actor for a in refusals] == [DAVE, DAVE]
        assert bot.slack.calls_to("chat.update") == []

        # Approving still works afterwards: the run was left as it was.
        bot.llm.reply_text("Both ran.")
        for card in cards:
            await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert_history_valid(bot.llm.requests[1])


async def test_cancel_with_nothing_to_cancel_starts_nothing(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Hello.")
        root = await bot.mention("hi", user=ALICE)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        await bot.message("cancel", user=ALICE, thread_ts=root)
        await bot.settle()
        assert len(bot.llm.requests) == 1
        [note] = bot.slack.calls_to("chat.postEphemeral")
        assert "nothing to cancel" in note.params["text"]


async def test_cancel_withdraws_a_queued_message(tmp_path: Path) -> None:
    policy = Policy.from_toml('[defaults]\nconcurrency = 1\napprovers = ["U0CAROL"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        held = HeldReplies()
        held.queue(bot.llm, 1)
        await bot.mention("first", user=ALICE)
        await held.wait_arrived(1)
        second = await bot.mention("second", user=BOB)
        await bot.settle(runs=False)
        assert any(t.startswith(":hourglass") for t in all_text(bot).splitlines())
        await bot.message("cancel", user=DAVE, thread_ts=second)  # not his
        await bot.settle(runs=False)
        await bot.message("cancel", user=BOB, thread_ts=second)
        await bot.settle(runs=False)
        held.release()
        await bot.settle()
        assert held.arrived == ["first"] and len(bot.llm.requests) == 1
        [item] = await bot.deps.store.queue_items(states=["cancelled"])
        assert item.text == "second"
        assert "Cancelled by <@U0BOB> before it started" in all_text(bot)
        assert [c.params["user"] for c in bot.slack.calls_to("chat.postEphemeral")] == [DAVE]


async def test_recovery_redraws_cards_left_live_by_a_crash_after_a_cancel(tmp_path: Path) -> None:
    """A cancel recorded with no redraw owed (simulated: straight in the stopped bot's store,
    the redraws it wrote taken out, as a release before the card redraws did, and a crash
    before its redraw): start-up finds the cards drawn pending for calls that are cancelled,
    and takes their buttons away; a second start-up redraws nothing. (A store writes the
    redraws with the cancel: tests/scenarios/test_card_redraws.py.)"""
    tools, policy = make_tools(tmp_path), Policy.from_toml(POLICY)
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        async with running_bot(tmp_path, tools=tools, policy=policy, llm=llm, slack=slack) as bot:
            root, cards = await paused(bot)
        async with SQLiteStore(tmp_path / "opsgate.db", person=user_mention) as store:
            session = await store.find_session("T0TEST", CHANNEL, root)
            assert session is not None
            outcome = await store.cancel_batch(session.id, user_id=BOB, via="button")
            assert outcome.cancelled
            await drop_redraws(store)
            stale = {r.id for r in await store.stale_cards()}
            assert stale == {c["ledger_id"] for c in cards}
        assert slack.calls_to("chat.update") == []

        async with running_bot(tmp_path, tools=tools, policy=policy, llm=llm, slack=slack) as bot:
            await bot.settle()
            store = bot.deps.store
            redrawn = {c.params["ts"]: c.params for c in bot.slack.calls_to("chat.update")}
            for card in cards:
                row = await store.get_call(card["ledger_id"])
                assert row is not None and row.card_ts in redrawn
                blocks = redrawn[row.card_ts]["blocks"]
                assert not any(b["type"] == "actions" for b in blocks)
                assert "Cancelled" in json.dumps(blocks)
            assert await store.stale_cards() == []
            updates = len(bot.slack.calls_to("chat.update"))
            await bot.service.recover()
            await bot.settle()
            assert len(bot.slack.calls_to("chat.update")) == updates


async def drop_redraws(store: Store) -> None:
    """Take the cards' redraws out of the outbox (what a release that wrote none left)."""
    for row in await store.claim_outbox("test", limit=1000, lease=timedelta(minutes=1)):
        if row.method == CARD_REDRAW:
            await store.outbox_sent(row.id)
        else:
            await store.outbox_later(row.id, row.created_at, "left to the bot")
