"""Approval cards, the reject modal and the mrkdwn helpers that keep untrusted text inert."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

from bot.slack.cards import (
    CardCall,
    CardOutcome,
    approval_card,
    card_text,
    decided_card,
    decided_text,
    overflow,
)
from bot.slack.ids import (
    ACTION_APPROVE,
    ACTION_CANCEL,
    ACTION_REASON,
    ACTION_REJECT,
    BLOCK_REASON,
    CALLBACK_REJECT,
)
from bot.slack.modals import reason_from_view, reject_modal
from bot.slack.mrkdwn import (
    code_span,
    escape_cut,
    escape_mrkdwn,
    one_line,
    preformatted,
    truncate,
    user_mention,
)
from tests.support.slack_requests import load_fixture, view_submission

HOSTILE = "<!channel> & <https://evil|click>"
HOSTILE_ESCAPED = "&lt;!channel&gt; &amp; &lt;https://evil|click&gt;"


def make_call(**changes: Any) -> CardCall:
    fields: dict[str, Any] = {
        "ledger_id": "led_01HX",
        "tool": "shell",
        "description": "Run a shell command on the ops host",
        "arguments": {"command": "systemctl restart nginx", "host": "web-1", "timeout": 30},
        "digest": "3f2a9c0d1e7b",
        "requested_by": "U0REQ",
    }
    fields.update(changes)
    return CardCall(**fields)


def all_text(blocks: Any) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Every mrkdwn/plain text string in the blocks, in order."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "plain_text") and isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(blocks)
    return found


def markup(blocks: list[dict[str, Any]]) -> list[str]:
    """Every `<...>` Slack would interpret as a link, mention or date."""
    return [m for text in texts(blocks) for m in re.findall(r"<[^<>]*>", text)]


def omitted_count(text: str) -> int:
    found = re.search(r"… (\d+) more characters not shown \(attached as a file\)", text)
    assert found is not None, text[-200:]
    return int(found[1])


# -- approval card -----------------------------------------------------------------------------


def test_approval_card_structure_and_buttons() -> None:
    blocks = approval_card(make_call())

    assert [block["type"] for block in blocks] == [
        "header",
        "section",
        "section",
        "section",
        "context",
        "actions",
    ]
    assert blocks[0]["text"] == {"type": "plain_text", "text": "Approval needed"}
    assert blocks[1]["text"]["text"] == (
        "`shell` wants to run\nRun a shell command on the ops host"
    )
    assert blocks[2]["text"]["text"] == "*command*\n```\nsystemctl restart nginx\n```"
    assert blocks[3]["text"]["text"] == "`host`: web-1\n`timeout`: 30"
    assert blocks[4]["elements"][0]["text"] == (
        "Requested by <@U0REQ> · digest `3f2a9c0d1e7b` · Approvers: anyone in the channel"
    )
    assert blocks[-1]["elements"] == [
        {
            "type": "button",
            "text": {"type": "plain_text", "text": "Approve"},
            "action_id": ACTION_APPROVE,
            "value": "led_01HX",
            "style": "primary",
        },
        {
            "type": "button",
            "text": {"type": "plain_text", "text": "Reject"},
            "action_id": ACTION_REJECT,
            "value": "led_01HX",
            "style": "danger",
        },
        {
            "type": "button",
            "text": {"type": "plain_text", "text": "Cancel run"},
            "action_id": ACTION_CANCEL,
            "value": "led_01HX",
            "confirm": {
                "title": {"type": "plain_text", "text": "Cancel the whole run?", "emoji": True},
                "text": {
                    "type": "plain_text",
                    "text": "Every call waiting here is rejected, nothing of this batch runs, "
                    "and the run ends.",
                },
                "confirm": {"type": "plain_text", "text": "Cancel run", "emoji": True},
                "deny": {"type": "plain_text", "text": "Keep waiting", "emoji": True},
            },
        },
    ]
    assert ACTION_APPROVE == "opsgate_approve" and ACTION_REJECT == "opsgate_reject"
    assert ACTION_CANCEL == "opsgate_cancel"
    # Every mrkdwn text is verbatim: Slack does not auto-link or auto-mention inside it.
    assert all(node.get("verbatim") is True for block in blocks for node in _mrkdwn_nodes(block))
    # slack_sdk can read the blocks back (they are valid Block Kit).
    assert [b.to_dict() for b in Block.parse_all(blocks)] == blocks


def _mrkdwn_nodes(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        own = [node] if node.get("type") == "mrkdwn" else []
        return own + [n for value in node.values() for n in _mrkdwn_nodes(value)]
    if isinstance(node, list):
        return [n for value in node for n in _mrkdwn_nodes(value)]
    return []


def test_hostile_arguments_are_escaped_everywhere() -> None:
    call = make_call(
        tool="sh<!here>",
        description=f"desc {HOSTILE}",
        arguments={"command": f"echo '{HOSTILE}'", "note": HOSTILE},
        requested_by="<!channel>",
        held=(("notify<!everyone>", {"text": HOSTILE}),),
    )
    blocks = approval_card(call)

    # The only markup left is what the card itself adds: none here (requester id is bogus).
    assert markup(blocks) == []
    assert f"echo '{HOSTILE_ESCAPED}'" in blocks[2]["text"]["text"]
    assert f"`note`: {HOSTILE_ESCAPED}" in blocks[3]["text"]["text"]
    assert f"desc {HOSTILE_ESCAPED}" in blocks[1]["text"]["text"]
    assert "`sh&lt;!here&gt;` wants to run" in blocks[1]["text"]["text"]
    assert "Requested by &lt;!channel&gt;" in blocks[4]["elements"][0]["text"]
    assert "&lt;!everyone&gt;" in blocks[5]["text"]["text"]
    # The buttons carry the ledger id, never the arguments.
    values = [e["value"] for e in blocks[-1]["elements"]]
    assert values == ["led_01HX", "led_01HX", "led_01HX"]
    assert "<" not in card_text(call) and "&lt;!here&gt;" in card_text(call)


def test_real_requester_mention_is_the_only_markup() -> None:
    blocks = approval_card(make_call(arguments={"command": HOSTILE}))
    assert markup(blocks) == ["<@U0REQ>"]


def test_long_command_is_cut_and_overflow_returns_it_whole() -> None:
    command = "echo start\n" + "x" * 9000 + "\necho end & done"
    call = make_call(arguments={"command": command})
    blocks = approval_card(call, arg_limit=2500)

    section = blocks[2]["text"]["text"]
    assert len(section) <= 3000
    body = section.split("```\n", 1)[1].split("\n```", 1)[0]
    omitted = omitted_count(section)
    assert body == command[: len(body)]  # only ASCII before the cut: nothing escaped
    assert len(body) + omitted == len(command)
    assert overflow(call, 2500) == command
    assert overflow(make_call(), 2500) is None


def test_cut_respects_escaping_growth() -> None:
    command = "&" * 2000  # escapes to 10000 characters
    blocks = approval_card(make_call(arguments={"command": command}))
    section = blocks[2]["text"]["text"]
    assert len(section) <= 3000
    body = section.split("```\n", 1)[1].split("\n```", 1)[0]
    assert set(body.split("&amp;")) == {""}  # no entity split in half
    omitted = omitted_count(section)
    assert body.count("&amp;") + omitted == 2000


def test_fences_inside_the_command_cannot_close_the_block() -> None:
    blocks = approval_card(make_call(arguments={"command": "a ```\n<!channel>\n``` b ````"}))
    section = blocks[2]["text"]["text"]
    assert section.count("```") == 2
    assert section.startswith("*command*\n```\n") and section.endswith("\n```")


def test_nested_arguments_are_shown_as_json_and_cut_with_the_whole_json_as_overflow() -> None:
    arguments = {"command": "deploy", "targets": [{"host": f"web-{i}"} for i in range(300)]}
    call = make_call(arguments=arguments)
    blocks = approval_card(call)
    other = blocks[3]["text"]["text"]
    assert other.startswith('*Other arguments*\n```\n{\n  "targets": [')
    assert "more characters not shown (attached as a file)" in other
    assert len(other) <= 3000
    assert json.loads(overflow(call) or "") == arguments


def test_short_nested_arguments_are_not_cut() -> None:
    call = make_call(arguments={"paths": ["/etc/hosts", "/etc/resolv.conf"]})
    blocks = approval_card(call)
    assert blocks[2]["text"]["text"] == (
        '*Arguments*\n```\n{\n  "paths": [\n    "/etc/hosts",\n    "/etc/resolv.conf"\n  ]\n}\n```'
    )
    assert overflow(call) is None


def test_raw_string_arguments_and_no_arguments() -> None:
    raw = '{"command": "ls", <broken'
    blocks = approval_card(make_call(arguments=raw))
    assert blocks[2]["text"]["text"] == (
        '*Arguments* (not JSON)\n```\n{"command": "ls", &lt;broken\n```'
    )
    assert approval_card(make_call(arguments={}))[2]["text"]["text"] == "_No arguments_"


def test_held_siblings_are_listed() -> None:
    call = make_call(held=(("read_file", {"path": "/etc/hosts"}), ("uptime", {})))
    blocks = approval_card(call)
    held = blocks[5]
    assert held["type"] == "section"
    assert held["text"]["text"] == (
        '*Runs once this batch is decided:*\n• `read_file` {"path": "/etc/hosts"}\n• `uptime` {}'
    )


def test_many_long_held_siblings_stay_within_block_limits() -> None:
    held = tuple((f"tool_{i}" + "&" * 100, {"x": "<" * 500}) for i in range(40))
    blocks = approval_card(make_call(held=held))
    text = blocks[5]["text"]["text"]
    assert len(text) <= 3000
    shown = text.count("\n• `tool_")
    assert text.endswith(f"• … and {40 - shown} more")
    assert 0 < shown <= 10


def test_multi_approval_progress_in_context() -> None:
    blocks = approval_card(make_call(required_approvals=2, approvals=("U0APP",)))
    assert blocks[4]["elements"][0]["text"] == (
        "Requested by <@U0REQ> · digest `3f2a9c0d1e7b` · 1 of 2 approvals (<@U0APP>)"
        " · Approvers: anyone in the channel"
    )
    single = approval_card(make_call())
    assert "approvals" not in single[4]["elements"][0]["text"]


def test_no_requester() -> None:
    blocks = approval_card(make_call(requested_by=None))
    assert blocks[4]["elements"][0]["text"] == (
        "digest `3f2a9c0d1e7b` · Approvers: anyone in the channel"
    )


def test_ledger_id_must_fit_a_button_value() -> None:
    with pytest.raises(ValueError, match="ledger id"):
        approval_card(make_call(ledger_id="x" * 2001))
    with pytest.raises(ValueError, match="ledger id"):
        approval_card(make_call(ledger_id=""))


def test_arg_limit_is_bounded() -> None:
    with pytest.raises(ValueError, match="arg_limit"):
        approval_card(make_call(), arg_limit=5000)


# -- decided card ------------------------------------------------------------------------------


def test_decided_card_has_no_actions_and_says_who_when_why() -> None:
    moment = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    outcome = CardOutcome("rejected", "U0BOSS", moment, reason=f"not now {HOSTILE}")
    blocks = decided_card(make_call(), outcome)

    assert all(block["type"] != "actions" for block in blocks)
    assert blocks[0]["text"]["text"] == "❌ Rejected"
    assert blocks[-1]["text"]["text"] == (
        "*Rejected* by <@U0BOSS> · "
        "<!date^1704164645^{date_short_pretty} at {time}|2024-01-02 03:04 UTC>\n"
        f"*Reason:* not now {HOSTILE_ESCAPED}"
    )
    # What happened leads, where the pending card says it "wants to run".
    title = blocks[1]["text"]["text"]
    assert title.startswith("`shell` was rejected by <@U0BOSS>: it did not run")
    assert "wants to run" not in all_text(blocks)
    # Same information as the pending card: arguments, requester, digest.
    pending = approval_card(make_call())
    assert blocks[2:5] == pending[2:5]
    assert decided_text(make_call(), outcome) == "Rejected by <@U0BOSS>: `shell`"


def test_decided_card_other_outcomes() -> None:
    moment = datetime(2024, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    approved = decided_card(make_call(), CardOutcome("approved", "U0BOSS", moment))
    assert approved[0]["text"]["text"] == "✅ Approved"
    assert approved[-1]["text"]["text"] == (
        "*Approved* by <@U0BOSS> · "
        "<!date^1704164645^{date_short_pretty} at {time}|2024-01-02 03:04 UTC>"
    )
    expired = decided_card(make_call(), CardOutcome("expired", None, moment))
    assert expired[-1]["text"]["text"].startswith("*Expired* · <!date^1704164645^")
    assert expired[-1]["text"]["text"].endswith(": no decision in time, the call was not run")
    naive = decided_card(make_call(), CardOutcome("cancelled", "U1", moment.replace(tzinfo=None)))
    assert "<!date^1704171845^" in naive[-1]["text"]["text"]  # naive means UTC


def test_a_call_that_ran_says_how_it_ended_escaped() -> None:
    moment = datetime(2024, 1, 2, 5, 4, 5, tzinfo=UTC)
    ended = CardOutcome("approved", "U0BOSS", moment, ran=True, ended="exit code: 2")
    title = json.dumps(decided_card(make_call(), ended))
    assert "`shell` ran (approved by <@U0BOSS>), ended: exit code: 2" in title
    assert "expires" not in title
    assert decided_text(make_call(), ended) == "Ran (approved by <@U0BOSS>): `shell`"
    hostile = "Error: <!channel> *boom*"
    failed = CardOutcome("approved", None, moment, ran=True, ended=hostile, failed=True)
    text = json.dumps(decided_card(make_call(), failed))
    assert "`shell` ran (approved), failed: Error: &lt;!channel&gt;" in text
    assert "<!channel>" not in text


# -- reject modal ------------------------------------------------------------------------------


def test_reject_modal_structure() -> None:
    view = reject_modal("led_01HX")
    assert view["type"] == "modal"
    assert view["callback_id"] == CALLBACK_REJECT == "opsgate_reject_modal"
    assert view["private_metadata"] == "led_01HX"
    assert view["submit"] == {"type": "plain_text", "text": "Reject"}
    assert view["close"] == {"type": "plain_text", "text": "Cancel"}
    reason = view["blocks"][-1]
    assert reason["type"] == "input"
    assert reason["block_id"] == BLOCK_REASON == "reason"
    assert reason["optional"] is True
    assert reason["element"]["type"] == "plain_text_input"
    assert reason["element"]["action_id"] == ACTION_REASON == "reason_input"
    assert reason["element"]["multiline"] is True
    assert View(**view).to_dict() == view


def test_modal_round_trips_a_reason_through_a_submission_shaped_like_the_fixture() -> None:
    modal = reject_modal("led_01HX")
    typed = f"  too risky on a Friday {HOSTILE}\n"
    payload = view_submission(
        modal["callback_id"],
        modal["private_metadata"],
        {BLOCK_REASON: {ACTION_REASON: typed}},
        user="U0BOSS",
        blocks=modal["blocks"],
    )
    fixture = load_fixture("view_submission_modal.json")
    assert payload.keys() == fixture.keys() and payload["view"].keys() == fixture["view"].keys()
    assert payload["view"]["state"]["values"] == {
        "reason": {"reason_input": {"type": "plain_text_input", "value": typed}}
    }
    assert payload["view"]["private_metadata"] == "led_01HX"
    # The reason is returned raw (escaping happens where it is shown), stripped.
    assert reason_from_view(payload["view"]) == f"too risky on a Friday {HOSTILE}"


def test_reason_absent_or_empty_is_none() -> None:
    empty = view_submission(CALLBACK_REJECT, "led", {BLOCK_REASON: {ACTION_REASON: None}}, user="U")
    assert reason_from_view(empty["view"]) is None
    blank = view_submission(CALLBACK_REJECT, "led", {BLOCK_REASON: {ACTION_REASON: "  "}}, user="U")
    assert reason_from_view(blank["view"]) is None
    # The fixture's own modal has other block ids: no reason in it.
    assert reason_from_view(load_fixture("view_submission_modal.json")["view"]) is None
    assert reason_from_view({}) is None


# -- text helpers ------------------------------------------------------------------------------


def test_escape_mrkdwn_escapes_exactly_three_characters() -> None:
    assert escape_mrkdwn(HOSTILE) == HOSTILE_ESCAPED
    assert escape_mrkdwn("&amp;") == "&amp;amp;"
    assert escape_mrkdwn("*bold* _it_ ~s~ `c` @here #chan") == "*bold* _it_ ~s~ `c` @here #chan"


def test_preformatted_fits_and_reports_cuts() -> None:
    assert preformatted("ls -la", 100) == ("```\nls -la\n```", False)
    for text in ["x" * 500, "&<>" * 200, "`" * 300, "a```b" * 100, "é" * 400]:
        block, cut = preformatted(text, 300)
        assert cut and len(block) <= 300, text[:10]
        assert block.count("```") == 2
        assert block.endswith(" more characters not shown (attached as a file)_")
        omitted = omitted_count(block)
        assert 0 < omitted < len(text)
    with pytest.raises(ValueError, match="no room"):
        preformatted("x" * 100, 20)


def test_truncate_and_friends() -> None:
    assert truncate("abcdef", 10) == "abcdef"
    assert truncate("abcdef", 4) == "abc…"
    assert escape_cut("<<<<", 10) == "&lt;&lt;…"
    assert len(escape_cut("<" * 100, 50)) <= 50
    assert one_line("a\n\n  b\tc", 20) == "a b c"
    assert code_span("rm `x`\n-rf") == "`rm ˋxˋ -rf`"
    assert user_mention("U0ABC") == "<@U0ABC>"
    assert user_mention("<!channel>") == "&lt;!channel&gt;"


def test_card_says_who_may_approve_and_when_it_expires() -> None:
    at = datetime(2026, 3, 2, 10, 30, tzinfo=UTC)
    call = make_call(approver_users=("U0ANN",), approver_groups=("S0OPS",), expires_at=at)
    context = approval_card(call)[4]["elements"][0]["text"]
    assert "Approvers: <@U0ANN> or members of <!subteam^S0OPS>" in context
    stamp = int(at.timestamp())
    assert (
        f"expires <!date^{stamp}^{{date_short_pretty}} at {{time}}|2026-03-02 10:30 UTC>" in context
    )


def test_allow_is_offered_only_where_its_dialog_shows_the_whole_scope() -> None:
    def actions(card: CardCall) -> list[str]:
        blocks = approval_card(card)
        return [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]

    short = make_call(allow_for="1h", allow_scope="`kubectl get …`")
    assert "opsgate_allow" in actions(short)
    long = make_call(allow_for="1h", allow_scope="`" + "k" * 400 + " …`")
    assert "opsgate_allow" not in actions(long)
    assert "opsgate_approve" in actions(long)
