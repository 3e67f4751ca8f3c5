"""A `/opsgate <request>` goes through the one intake as one row and one commit before its 200,
its `slash` row (not a `request` row and then a `slash` row, each its own commit), and keeps
the intake's guarantees: a replay of the signed request starts nothing, a word answered at once
stays a `request` row, and a `request` row an earlier release left behind is handled once.
Through the real app over signed loopback HTTP and a real SQLite file."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from tests.scenarios.test_app import ALICE, make_tools
from tests.scenarios.test_intake import _commits, _inbox, _written_before_ack, handed_back_once
from tests.support.harness import CHANNEL, TEAM, running_bot
from tests.support.slack_requests import slash_command


async def test_an_opsgate_request_is_one_row_and_one_commit_before_its_200(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        await bot.settle()
        committed = _commits(bot)
        acked = _written_before_ack(bot, committed)
        bot.llm.reply_text("Disk is fine.")
        response, _ = await bot.slash("check the disk", user=ALICE)
        assert response.status_code == 200
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert acked == [["inbox_add"]]  # one commit, then the listener acknowledges
        [(kind, state, payload)] = _inbox(tmp_path / "opsgate.db")
        assert (kind, state) == ("slash", "done")  # the row the run was processed from
        expected = {"team": TEAM, "channel": CHANNEL, "user": ALICE, "text": "check the disk"}
        assert payload == expected
        assert committed.count("inbox_add") == 1


async def test_an_opsgate_request_replayed_starts_one_run(tmp_path: Path) -> None:
    """The same signed body twice (a replay within Slack's signature window): the second finds
    the request's keys taken and is answered 200 with nothing started."""
    body = slash_command(
        "check the disk", user=ALICE, channel=CHANNEL, team=TEAM, trigger_id="77.T0TEST.opsgate"
    )
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_text("Disk is fine.")
        bot.llm.reply_text("A second answer that must not come.")
        first = await bot.post(body, "application/x-www-form-urlencoded")
        again = await bot.post(body, "application/x-www-form-urlencoded")
        assert (first.status_code, again.status_code) == (200, 200)
        await bot.llm.wait_for_requests(1)
        await bot.settle()
        assert len(bot.llm.requests) == 1
        assert [(k, s) for k, s, _ in _inbox(tmp_path / "opsgate.db")] == [("slash", "done")]


async def test_a_word_answered_at_once_is_still_a_request_row(tmp_path: Path) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        response, hook = await bot.slash("help", user=ALICE)
        assert response.status_code == 200
        [answer] = await bot.hook_answers(hook)
        await bot.settle()
        assert "/opsgate" in str(answer)
        assert [(k, s) for k, s, _ in _inbox(tmp_path / "opsgate.db")] == [("request", "done")]
        assert bot.llm.requests == []


async def test_an_opsgate_request_an_earlier_release_saved_as_a_request_row_runs_once(
    tmp_path: Path,
) -> None:
    """A `request` row a kill -9 left under the release before this one (which saved every
    command so): handed back at the start, its listener saves the `slash` row itself, under
    the invocation key, and the run happens once, in this start and never again."""
    form = slash_command(
        "check the disk", user=ALICE, channel=CHANNEL, team=TEAM, trigger_id="88.T0TEST.opsgate"
    ).decode()
    body = dict(urllib.parse.parse_qsl(form, keep_blank_values=True))
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        await bot.deps.store.inbox_add(
            "request",
            {"kind": "command", "body": body},
            keys=[f"request:command:{TEAM}:88.T0TEST.opsgate"],
        )
    assert await handed_back_once(tmp_path, "check the disk") == [
        ("request", "done"),
        ("slash", "done"),
    ]
