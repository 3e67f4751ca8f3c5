"""What a card tells the person deciding beyond the call: the model's stated reason (its words,
escaped, one line, clipped), each rule that must approve and what it still needs, the parts
the policy judged and why, why "Allow for" is absent, and what happened once decided."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from bot.runs.views import CardCall, CardOutcome, CardPart, CardRequirement
from bot.slack.card_notes import REASON_SHOWN_MAX
from bot.slack.cards import SECTION_TEXT_MAX, approval_card, decided_card

EXPIRES = datetime(2024, 1, 2, 4, 4, 5, tzinfo=UTC)
DEPLOY = CardRequirement(
    "tools.run_command.rules[0] (deploy …)", 1, ("U0BOB",), approver_users=("U0BOB",)
)
DROP = CardRequirement(
    "tools.run_command.rules[1] (drop-db …)", 2, (), approver_users=("U0CAROL", "U0DAVE")
)


def make_call(**changes: Any) -> CardCall:
    fields: dict[str, Any] = {
        "ledger_id": "led_01HX",
        "tool": "run_command",
        "description": "",
        "arguments": {"command": "deploy app; drop-db prod"},
        "digest": "3f2a9c0d1e7b",
        "requested_by": "U0REQ",
        "expires_at": EXPIRES,
    }
    fields.update(changes)
    return CardCall(**fields)


def texts(blocks: list[dict[str, Any]]) -> list[str]:
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


def _with(blocks: list[dict[str, Any]], marker: str) -> list[str]:
    return [t for t in texts(blocks) if marker in t]


def _within_limits(blocks: list[dict[str, Any]]) -> None:
    assert len(blocks) <= 50
    assert all(len(t) <= SECTION_TEXT_MAX for t in texts(blocks))


def test_the_models_reason_is_marked_as_its_words_escaped_on_one_line() -> None:
    said = (
        "Restarting *web* <!channel> as\n\n:white_check_mark: *Approved by security* [ok](http://x)"
    )
    [line] = _with(approval_card(make_call(model_reason=said)), "The model says")
    assert line.startswith(":speech_balloon: _The model says:_ “")
    assert "\n" not in line  # its words cannot draw a line of the card of their own
    assert "&lt;!channel&gt;" in line and "<!channel>" not in line
    assert "[ok](http://x)" not in line and "ok (http://x)" in line


def test_the_models_reason_is_clipped_and_absent_when_it_said_nothing() -> None:
    blocks = approval_card(make_call(model_reason="because " + "<" * 5000))
    [line] = _with(blocks, "The model says")
    assert len(line) <= REASON_SHOWN_MAX + 60 and line.endswith("…”")
    _within_limits(blocks)
    for nothing in (None, "   "):
        assert not _with(approval_card(make_call(model_reason=nothing)), "The model says")


def test_each_rule_that_must_approve_and_what_it_still_needs() -> None:
    blocks = approval_card(make_call(requirements=(DEPLOY, DROP), required_approvals=1))
    [listed] = _with(blocks, "Every one of these must approve")
    assert ":white_check_mark: `tools.run_command.rules[0] (deploy …)`: 1 of 1 (<@U0BOB>)" in listed
    assert (
        ":hourglass_flowing_sand: `tools.run_command.rules[1] (drop-db …)`: 0 of 2 · "
        "2 more from <@U0CAROL> or <@U0DAVE>"
    ) in listed
    # The context line's single "Approvers:" would name only the deciding rule's: left out.
    assert not _with(blocks, "Approvers:")


def test_one_rule_keeps_the_approvers_line() -> None:
    blocks = approval_card(make_call(approver_users=("U0BOB",), required_approvals=2))
    assert not _with(blocks, "Every one of these")
    [context] = _with(blocks, "Approvers:")
    assert "0 of 2 approvals" in context and "Approvers: <@U0BOB>" in context


def test_the_parts_the_policy_judged_and_why() -> None:
    parts = (
        CardPart("deploy app", "needs approval", "tools.run_command.rules[0]", "deploy …"),
        CardPart(
            "echo `x`", "needs approval", None, "uses command substitution: approval required"
        ),
    )
    [judged] = _with(approval_card(make_call(parts=parts)), "What the policy judged")
    assert "1. `deploy app` → _needs approval_ · `tools.run_command.rules[0]`: deploy …" in judged
    assert "2. `echo ˋxˋ` → _needs approval_ · uses command substitution" in judged
    one = (CardPart("deploy app", "needs approval", "tools.run_command.rules[0]", "deploy …"),)
    assert not _with(approval_card(make_call(parts=one)), "What the policy judged")


def test_many_parts_stay_within_slacks_limits() -> None:
    parts = tuple(
        CardPart("x" * 500 + "<", "needs approval", None, "why " * 100) for _ in range(40)
    )
    many = tuple(
        CardRequirement(f"tools.run_command.rules[{i}] ({'y' * 300})", 2, (), ("U0A",) * 20)
        for i in range(40)
    )
    blocks = approval_card(make_call(parts=parts, requirements=many, model_reason="z" * 9000))
    _within_limits(blocks)
    [judged] = _with(blocks, "What the policy judged")
    assert judged.endswith("more")


def test_why_allow_for_is_absent() -> None:
    blocks = approval_card(make_call(no_allow="several rules must each approve this call"))
    [line] = _with(blocks, "No “Allow for”")
    assert line.endswith("several rules must each approve this call")
    offered = approval_card(make_call(allow_for="1h", allow_scope="`deploy app`"))
    assert not _with(offered, "No “Allow for”")
    too_long = approval_card(make_call(allow_for="1h", allow_scope="x" * 400))
    [line] = _with(too_long, "No “Allow for”")
    assert "too long to confirm" in line
    # A locked card says why it has no Approve; it needs no second line about "Allow for".
    locked = approval_card(make_call(no_allow="the policy forbids this call", locked="forbidden"))
    assert not _with(locked, "No “Allow for”")


def test_a_decided_card_says_what_happened_and_drops_the_expiry() -> None:
    moment = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    call = make_call(requirements=(DEPLOY, DROP), no_allow="several rules must each approve")
    cases = {
        CardOutcome("approved", "U0BOB", moment, ran=True): "`run_command` ran",
        CardOutcome("approved", "U0BOB", moment): "`run_command` was approved by <@U0BOB> to run",
        CardOutcome("rejected", "U0BOB", moment): "`run_command` was rejected by <@U0BOB>",
        CardOutcome("rejected", "", moment): "`run_command` was rejected by the policy",
        CardOutcome("expired", None, moment): "`run_command` expired: nobody decided in time",
        CardOutcome("cancelled", "U0BOB", moment): "`run_command` was cancelled by <@U0BOB>",
    }
    for outcome, title in cases.items():
        blocks = decided_card(call, outcome)
        shown = json.dumps(blocks, ensure_ascii=False)
        assert texts(blocks)[1].startswith(title), outcome
        assert "wants to run" not in shown and "expires" not in shown
        assert "No “Allow for”" not in shown and "more from" not in shown
    pending = json.dumps(approval_card(call), ensure_ascii=False)
    assert "wants to run" in pending and "expires" in pending
