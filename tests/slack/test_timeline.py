"""A run's tool calls as a timeline: task_update chunks in Slack's stream, or one context block
edited in place where Slack cannot stream; within Slack's sizes, untrusted text escaped.

Through the real Bolt app (signed requests), the Slack Web API stand-in (which refuses chunks
Slack would refuse), the LLM stand-in and a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.policy import Policy
from bot.runs.timeline import Task
from bot.slack.timeline import (
    TASK_DETAILS_MAX,
    TASK_TITLE_MAX,
    task_chunk,
    timeline_blocks,
)
from tests.scenarios.test_app import ALICE, BOB, CAROL, make_tools
from tests.support.harness import TEAM, Bot, running_bot
from tests.support.slack_api import SlackAPIStandIn

ALLOW_POLICY = (
    '[tools.run_command]\napproval = "rules"\nallow_for = "1h"\n'
    '[[tools.run_command.rules]]\nprefix = ["echo"]\nallow_prefix = ["echo", "hi"]\n'
    '[[tools.run_command.rules]]\nprefix = ["rm"]\n'
)
"""Echo needs approval and an "Allow for" covers `echo hi …` (the rule's declared shape); rm
always needs approval."""


LOOK_THEN_GATED = [
    ("call_0", "echo", {"text": "looking"}),
    ("call_1", "run_command", {"command": "echo hi"}),
]
"""A turn whose gated call has a call beside it that needs no approval: a timeline whose every
task waits for approval is not shown (each card says it), this one is, through the pause."""


def task_chunks(slack: SlackAPIStandIn) -> list[dict[str, Any]]:
    """Every task_update chunk the bot streamed, in the order sent."""
    out: list[dict[str, Any]] = []
    for call in slack.calls:
        if call.method not in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            continue
        if not call.ok:
            continue
        chunks = call.params.get("chunks") or []
        if isinstance(chunks, str):
            chunks = json.loads(chunks)
        out.extend(c for c in chunks if c.get("type") == "task_update")
    return out


def statuses(chunks: list[dict[str, Any]], task_id: str) -> list[str]:
    return [c["status"] for c in chunks if c["id"] == task_id]


def details(chunks: list[dict[str, Any]], task_id: str) -> list[str]:
    return [c.get("details", "") for c in chunks if c["id"] == task_id]


async def _allow_echo(bot: Bot) -> None:
    """A first run in the thread whose card BOB answers with "Allow for 1h"."""
    bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo hi one"})])
    bot.llm.reply_text("Done.")
    await bot.mention("first", user=ALICE, ts="1700000001.000100")
    [card] = await bot.wait_cards(1)
    await bot.click("opsgate_allow", card["ledger_id"], user=BOB)
    await bot.llm.wait_for_requests(2)
    await bot.settle()


async def test_two_calls_move_through_their_statuses_one_allowed_one_rejected(
    tmp_path: Path,
) -> None:
    policy = Policy.from_toml(ALLOW_POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        await _allow_echo(bot)
        [allowance] = await bot.deps.store.active_allowances()
        before = len(task_chunks(bot.slack))

        # One turn, two calls: the first runs under BOB's allowance, the second waits.
        bot.llm.reply_tool_calls(
            [
                ("call_2", "run_command", {"command": "echo hi two"}),
                ("call_3", "run_command", {"command": "rm -rf /srv/cache"}),
            ]
        )
        bot.llm.reply_text("The echo ran; the removal was refused.")
        await bot.mention("second", user=CAROL, ts="1700000002.000100")
        [_, card] = await bot.wait_cards(2)
        await bot.click("opsgate_reject", card["ledger_id"], user=BOB)
        await bot.submit_reject(card["ledger_id"], "not now", user=BOB)
        await bot.llm.wait_for_requests(4)
        await bot.settle()

        chunks = task_chunks(bot.slack)[before:]
        # The allowed call: pending while the batch waits (under the allowance; written and
        # held, one chunk), then in the resume's timeline running as its tool starts (its
        # seeded "pending" coalesced away), then complete.
        assert statuses(chunks, "call_2") == ["pending", "in_progress", "complete"]
        assert "allowance granted by" in details(chunks, "call_2")[0]
        assert f"allowance granted by <@{BOB}>" in details(chunks, "call_2")[-1]
        assert details(chunks, "call_2")[-1].startswith("ran in ")
        assert allowance.granted_by == BOB
        # The gated call: waiting for approval (0 of 1) and linked to its card, then rejected.
        assert statuses(chunks, "call_3")[-1] == "error"
        waiting = [c for c in chunks if c["id"] == "call_3" and "waiting" in c["details"]]
        assert waiting and waiting[-1]["details"] == "waiting for approval (0 of 1)"
        [source] = waiting[-1]["sources"]
        assert source["url"].startswith("https://opsgate-test.slack.com/archives/")
        assert details(chunks, "call_3")[-1] == f"rejected by <@{BOB}>"
        titles = {c["id"]: c["title"] for c in chunks}
        assert titles["call_3"] == "run_command rm -rf /srv/cache"
        # Every timeline stream was started in timeline mode and stopped.
        started = [
            c
            for c in bot.slack.calls_to("chat.startStream")
            if any(k.get("type") == "task_update" for k in c.params.get("chunks") or [])
        ]
        assert started and all(c.params["task_display_mode"] == "timeline" for c in started)
        streams = {c.response["ts"] for c in started}
        stopped = {c.params["ts"] for c in bot.slack.calls_to("chat.stopStream") if c.ok}
        assert streams <= stopped

        # A later run in the same thread starts a timeline of its own: the old batch's
        # rejected call is not shown again.
        shown = len(task_chunks(bot.slack))
        bot.llm.reply_text("Nothing to run.")
        await bot.mention("anything else?", user=CAROL, thread_ts="1700000002.000100")
        await bot.llm.wait_for_requests(5)
        await bot.settle()
        assert task_chunks(bot.slack)[shown:] == []


def _is_timeline(call: Any) -> bool:
    blocks = call.params.get("blocks") or []
    return bool(blocks) and blocks[0].get("type") == "context"


@pytest.mark.parametrize("refusal", ["unknown_method", "feature_not_enabled", "not_allowed"])
async def test_without_streaming_a_run_has_one_timeline_message_through_its_pause(
    tmp_path: Path, refusal: str
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.slack.set_streaming_supported(False, error=refusal)
        bot.llm.reply_tool_calls(LOOK_THEN_GATED)
        bot.llm.reply_text("Done.")
        await bot.mention("go", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.settle()
        [posted] = [c for c in bot.slack.calls_to("chat.postMessage") if _is_timeline(c)]
        channel, ts = posted.params["channel"], posted.response["ts"]
        paused = bot.slack.message(channel, ts)
        assert paused is not None
        text = paused["blocks"][0]["elements"][0]["text"]
        assert "waiting for approval (0 of 1)" in text and "|approval card>" in text

        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        # The resume went on in the paused part's message: no second one, edits to it only.
        assert [c for c in bot.slack.calls_to("chat.postMessage") if _is_timeline(c)] == [posted]
        edited = [c for c in bot.slack.calls_to("chat.update") if _is_timeline(c)]
        assert edited and {c.params["ts"] for c in edited} == {ts}
        final = bot.slack.message(channel, ts)
        assert final is not None and len(final["blocks"]) == 1
        last = final["blocks"][0]["elements"][0]["text"].splitlines()[-1]
        assert last.startswith("✅ run_command") and f"approved by <@{BOB}>" in last
        assert "waiting" not in last
        session = await bot.deps.store.find_session(TEAM, channel, posted.params["thread_ts"])
        assert session is not None and await bot.deps.store.kept_timeline(session.id) is None


def test_titles_and_details_are_escaped_and_within_slacks_sizes() -> None:
    hostile = "<!channel> & <@U0ALICE> " + "x" * 2000 + "\u202e"
    task = Task(
        "call_1",
        "run_command",
        hostile,
        "waiting",
        approvals=(1, 2),
        allowance_by="U0BOB",
    )
    chunk = task_chunk(task)
    assert len(chunk["title"]) <= TASK_TITLE_MAX
    assert len(chunk["details"]) <= TASK_DETAILS_MAX
    assert "<!channel>" not in chunk["title"] and "&lt;!channel&gt;" in chunk["title"]
    assert "&amp;" in chunk["title"]
    assert "\u202e" not in chunk["title"]
    assert chunk["status"] == "pending"
    assert chunk["details"].startswith("waiting for approval (1 of 2)")


def test_the_context_block_stays_within_its_size_for_many_tasks() -> None:
    long = "y" * 300
    tasks = [Task(f"call_{n}", "http_request", long, "complete") for n in range(80)]
    [block] = timeline_blocks(tasks)
    text = block["elements"][0]["text"]
    assert len(text) <= 3000
    assert text.endswith("more")


def _timeline_texts(bot: Bot) -> list[str]:
    """The fallback's context block texts, as posted and edited, in order."""
    out: list[str] = []
    for call in bot.slack.calls:
        if call.method not in ("chat.postMessage", "chat.update") or not call.ok:
            continue
        blocks = call.params.get("blocks") or []
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if blocks and blocks[0].get("type") == "context":
            out.append(blocks[0]["elements"][0]["text"])
    return out


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "fallback"])
async def test_a_partial_approval_moves_the_waiting_count_on(
    tmp_path: Path, streaming: bool
) -> None:
    policy = Policy.from_toml("[defaults]\nrequired_approvals = 2\n")
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.slack.set_streaming_supported(streaming)
        bot.llm.reply_tool_calls(LOOK_THEN_GATED)
        bot.llm.reply_text("Done.")
        await bot.mention("go", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.settle()
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.settle()
        if streaming:
            waiting = [d for d in details(task_chunks(bot.slack), "call_1") if "approval" in d]
            # Waiting once its card is posted (the count-less state before is coalesced
            # away); the pause ends the stream, so the count edits its message.
            assert waiting == ["waiting for approval (0 of 2)"]
            [started] = bot.slack.calls_to("chat.startStream")
            [stopped] = bot.slack.calls_to("chat.stopStream")
            assert stopped.params["ts"] == started.response["ts"]
            ts = started.response["ts"]
            [edit] = [c for c in bot.slack.calls_to("chat.update") if c.params["ts"] == ts]
            assert "(1 of 2)" in edit.params["blocks"][0]["elements"][0]["text"]
        else:
            shown = [t for t in _timeline_texts(bot) if "waiting for approval" in t]
            assert "(0 of 2)" in shown[-2] and "(1 of 2)" in shown[-1]
        await bot.click("opsgate_approve", card["ledger_id"], user=CAROL)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        if streaming:
            chunks = task_chunks(bot.slack)
            assert statuses(chunks, "call_1")[-2:] == ["in_progress", "complete"]
            started = {c.response["ts"] for c in bot.slack.calls_to("chat.startStream")}
            stopped = {c.params["ts"] for c in bot.slack.calls_to("chat.stopStream") if c.ok}
            assert started <= stopped
        else:
            assert _timeline_texts(bot)[-1].splitlines()[-1].startswith("✅ run_command echo hi")


def _plan_chunks(slack: SlackAPIStandIn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for call in slack.calls:
        if call.method in ("chat.startStream", "chat.appendStream") and call.ok:
            out.extend(c for c in call.params.get("chunks") or [] if c["type"] == "plan_update")
    return out


PLAN_TEXT = (
    "Here is the plan:\n1. Check the disk <!channel> & friends\n2. Clear the cache "
    + "z" * 400
    + "\n3. Check the disk again\n"
)


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "fallback"])
async def test_the_models_numbered_steps_are_the_plan(tmp_path: Path, streaming: bool) -> None:
    policy = Policy.from_toml('[tools.run_command]\napproval = "never"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.slack.set_streaming_supported(streaming)
        bot.llm.reply_tool_calls(
            [("call_1", "run_command", {"command": "echo df"})], text=PLAN_TEXT
        )
        bot.llm.reply_text("The disk is fine:\n1. 40% used\n2. nothing to clear")
        await bot.mention("is the disk full?", user=ALICE)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        if streaming:
            # One plan chunk, first in the timeline's stream (with its task), escaped and cut;
            # the final answer's numbered list is no plan.
            [plan] = _plan_chunks(bot.slack)
            title = plan["title"]
            assert title.startswith("Plan: 1. Check the disk &lt;!channel&gt; &amp; friends · 2.")
            assert len(title) <= TASK_TITLE_MAX and title.endswith("…")
            [start] = [
                c
                for c in bot.slack.calls_to("chat.startStream")
                if any(k["type"] == "plan_update" for k in c.params.get("chunks") or [])
            ]
            assert [k["type"] for k in start.params["chunks"]] == ["plan_update", "task_update"]
            assert statuses(task_chunks(bot.slack), "call_1")[-1] == "complete"
        else:
            [text] = {t for t in _timeline_texts(bot) if "✅" in t}
            first, task = text.split("\n")
            assert first.startswith("🗒️ Plan: 1. Check the disk &lt;!channel&gt; &amp; friends")
            assert "3. Check the disk again" in first and "<!channel>" not in first
            assert task.startswith("✅ run_command echo df")


async def test_task_changes_before_a_flush_go_out_as_one_append(tmp_path: Path) -> None:
    """A 5-call run: the changes between two moments the run waits (a tool starting, the batch
    answered) are one call with the latest state of each task. Before coalescing, this run
    cost 15 chunks in 15 calls (one per change); now 14 chunks in 6 calls."""
    policy = Policy.from_toml('[tools.run_command]\napproval = "never"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        calls = [(f"call_{n}", "run_command", {"command": f"echo {n}"}) for n in range(1, 6)]
        bot.llm.reply_tool_calls(calls)
        bot.llm.reply_text("Done.")
        await bot.mention("go", user=ALICE)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        sent = [
            [(c["id"], c["status"]) for c in call.params.get("chunks") or []]
            for call in bot.slack.calls
            if call.ok and call.method in ("chat.startStream", "chat.appendStream")
            if any(c["type"] == "task_update" for c in call.params.get("chunks") or [])
        ]
        # The five calls written and the first started: one startStream (call_1's "pending"
        # is replaced by its "in_progress"); then each answer with the next start; then the
        # last answer.
        assert sent[0] == [("call_1", "in_progress")] + [
            (f"call_{n}", "pending") for n in (2, 3, 4, 5)
        ]
        for n in (1, 2, 3, 4):
            assert sent[n] == [(f"call_{n}", "complete"), (f"call_{n + 1}", "in_progress")]
        assert sent[5] == [("call_5", "complete")]
        assert len(sent) == 6 and sum(len(s) for s in sent) == 14
        assert len(bot.slack.calls_to("chat.appendStream")) == 5


async def test_a_cancelled_pause_shows_its_calls_not_run_on_its_ended_stream(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls(LOOK_THEN_GATED)
        root = await bot.mention("go", user=ALICE)
        await bot.wait_cards(1)
        await bot.settle()
        # The pause ended the stream (not in the burst after the decisions).
        [stopped] = [c for c in bot.slack.calls_to("chat.stopStream") if c.ok]
        [started] = bot.slack.calls_to("chat.startStream")
        assert stopped.params["ts"] == started.response["ts"]
        await bot.message("cancel", user=ALICE, thread_ts=root)
        await bot.settle()
        # The cancel edits the same message: the call was not run.
        ts = started.response["ts"]
        [edit] = [c for c in bot.slack.calls_to("chat.update") if c.params["ts"] == ts]
        assert "⏭️ run_command" in edit.params["blocks"][0]["elements"][0]["text"]
        assert "not run" in edit.params["blocks"][0]["elements"][0]["text"]
        assert len(bot.slack.calls_to("chat.stopStream")) == 1
        assert len(bot.llm.requests) == 1


async def test_a_paused_stream_that_slack_expired_is_edited_in_place(tmp_path: Path) -> None:
    """Slack ends a stream without appends after a while; a pause can be longer. The partial
    approval's count then edits the same message (as the fallback's block), no new one."""
    policy = Policy.from_toml("[defaults]\nrequired_approvals = 2\n")
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        bot.llm.reply_tool_calls(LOOK_THEN_GATED)
        bot.llm.reply_text("Done.")
        await bot.mention("go", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.settle()
        [started] = bot.slack.calls_to("chat.startStream")
        timeline_ts = started.response["ts"]
        bot.slack.expire_streams()
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.settle()
        [edit] = [c for c in bot.slack.calls_to("chat.update") if c.params["ts"] == timeline_ts]
        assert "waiting for approval (1 of 2)" in edit.params["blocks"][0]["elements"][0]["text"]
        assert not [t for t in _timeline_texts(bot) if "(1 of 2)" not in t]  # no new message
        await bot.click("opsgate_approve", card["ledger_id"], user=CAROL)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        # The resume's timeline is a stream of its own, stopped at its end.
        assert statuses(task_chunks(bot.slack), "call_1")[-1] == "complete"
        assert [c.ok for c in bot.slack.calls_to("chat.stopStream")][-1]


async def test_the_resumes_timeline_stream_ends_before_the_answer_starts(tmp_path: Path) -> None:
    """each timeline stream is stopped as soon as no task moves (the pause; the
    batch answered), so its `chat.stopStream` is not queued behind the answers' streams."""
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls(LOOK_THEN_GATED)
        bot.llm.reply_text("Done, all fine.")
        await bot.mention("go", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.settle()
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        streams = [
            c for c in bot.slack.calls if c.method in ("chat.startStream", "chat.stopStream")
        ]
        timeline = [c for c in streams if c.params.get("task_display_mode") == "timeline"]
        answer = [c for c in streams if "Done" in json.dumps(c.params)]
        assert len(timeline) == 2 and answer  # the pause's, the resume's; the answer
        resumed_ts = timeline[1].response["ts"]
        [stop] = [
            c for c in streams if c.method == "chat.stopStream" and c.params["ts"] == resumed_ts
        ]
        assert streams.index(stop) < streams.index(answer[0])
        assert statuses(task_chunks(bot.slack), "call_1")[-1] == "complete"


async def test_without_streaming_two_pauses_of_one_run_keep_one_timeline_message(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.slack.set_streaming_supported(False, error="team_not_enabled")
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo one"})])
        bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "echo two"})])
        bot.llm.reply_text("Both ran.")
        await bot.mention("go", user=ALICE)
        [first] = await bot.wait_cards(1)
        await bot.click("opsgate_approve", first["ledger_id"], user=BOB)
        [_, second] = await bot.wait_cards(2)
        await bot.click("opsgate_approve", second["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(3)
        await bot.settle()
        [posted] = [c for c in bot.slack.calls_to("chat.postMessage") if _is_timeline(c)]
        final = bot.slack.message(posted.params["channel"], posted.response["ts"])
        assert final is not None
        lines = final["blocks"][0]["elements"][0]["text"].splitlines()
        assert [line[:1] for line in lines] == ["✅", "✅"], lines
        assert "echo one" in lines[0] and "echo two" in lines[1]


async def test_the_paused_streams_approved_call_is_left_settled_not_waiting(
    tmp_path: Path,
) -> None:
    """The pause ended the timeline's stream with the call waiting; the resume streams a
    timeline of its own. The paused message must not go on saying the call waits: it says
    who approved it and that it carries on below."""
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        bot.llm.reply_tool_calls(LOOK_THEN_GATED)
        bot.llm.reply_text("Done.")
        await bot.mention("go", user=ALICE)
        [card] = await bot.wait_cards(1)
        await bot.settle()
        [started] = bot.slack.calls_to("chat.startStream")
        paused_ts = started.response["ts"]
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        message = bot.slack.message(started.params["channel"], paused_ts)
        assert message is not None
        shown = json.dumps(message.get("blocks"))  # what the edit left (the chunks: before)
        assert "waiting for approval" not in shown
        assert f"approved by <@{BOB}>: it runs in the timeline below" in shown
        # The resume's own stream carries the call on to its end.
        timelines = [
            c
            for c in bot.slack.calls_to("chat.startStream")
            if c.params.get("task_display_mode") == "timeline"
        ]
        assert len(timelines) == 2 and timelines[0] is started
        assert statuses(task_chunks(bot.slack), "call_1")[-1] == "complete"
