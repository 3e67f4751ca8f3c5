"""The Slack wire strings already out there, pinned as literals.

Cards posted by an older release are still in channels, with their buttons; `manifest.yml` is
pasted into api.slack.com once. A renamed action id, callback id, block-id format or metadata
type would leave those buttons dead, so every string is collected from what the public builders
render and from the manifest, and compared against the literal values shipped so far.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bot.runs.views import (
    AllowanceInfo,
    AllowChoice,
    AllowForm,
    CardCall,
    CardOutcome,
    CardPreview,
    EditField,
    EditForm,
    GlassInfo,
    HomeView,
)
from bot.slack.cards import approval_card, decided_card, minimal_blocks
from bot.slack.freezes import break_glass_modal
from bot.slack.home import home_view
from bot.slack.ids import COMMAND, SHORTCUT, card_metadata, queue_metadata
from bot.slack.modals import (
    FeedbackClick,
    allow_modal,
    edit_modal,
    feedback_blocks,
    feedback_modal,
    reject_modal,
)

MANIFEST = Path(__file__).resolve().parents[2] / "manifest.yml"

ACTION_IDS = {
    "allow_shape_choice",
    "opsgate_allow",
    "opsgate_approve",
    "opsgate_cancel",
    "opsgate_edit",
    "opsgate_feedback",
    "opsgate_reject",
    "opsgate_rerun_preview",
    "opsgate_revoke",
    "feedback_reason_input",
    "reason_choice_select",
    "reason_input",
    "value",
    # Change freezes
    "opsgate_break_glass",
    "opsgate_mark_reviewed",
    "glass_reason_input",
}
CALLBACK_IDS = {
    "opsgate_allow_modal",
    "opsgate_edit_modal",
    "opsgate_feedback_modal",
    "opsgate_reject_modal",
    "opsgate_break_glass_modal",
}
FIXED_BLOCK_IDS = {"allow_shape", "reason", "reason_choice", "feedback_reason", "glass_reason"}
SESSION = "0123456789abcdef0123456789abcdef"
FEEDBACK_BLOCK = f"opsgate_feedback:{SESSION}"
FEEDBACK_VALUES = ("good", "bad")
DIGEST = "3f2a9c0d1e7b"
PREVIEW_DIGEST = "ab" * 32
LEDGER = "led_01HX"
CARD_EVENT = "opsgate_card"
QUEUE_EVENT = "opsgate_queue"
SHORTCUT_ID = "opsgate_ask"
SLASH_COMMAND = "/opsgate"


def _call(**changes: Any) -> CardCall:
    fields: dict[str, Any] = {
        "ledger_id": LEDGER,
        "tool": "run_command",
        "description": "Run a command",
        "arguments": {"command": "systemctl restart nginx"},
        "digest": DIGEST,
        "requested_by": "U0REQ",
        "can_edit": True,
        "allow_for": "1h",
        "allow_scope": "`systemctl restart *`",
    }
    fields.update(changes)
    return CardCall(**fields)


def _rendered() -> list[Any]:
    """Every card, modal and Home view the bot posts, in their fullest form."""
    call = _call()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    allowance = AllowanceInfo("alw_1", "C1", "run_command", "systemctl *", "U1", now)
    form = EditForm(LEDGER, "run_command", DIGEST, (EditField("command", "ls", True),), True)
    choice = AllowChoice("kubectl get pods …", ("kubectl get pods -n b",), ("kubectl delete",))
    allow = AllowForm(LEDGER, "run_command", DIGEST, "1h", (choice, choice))
    preview = CardPreview("ls -ld /srv/x", "drwxr-x--- /srv/x", 0, None, now, PREVIEW_DIGEST)
    return [
        approval_card(call),
        approval_card(_call(preview=preview)),
        approval_card(_call(locked="arguments_not_attached")),
        decided_card(call, CardOutcome("approved", "U1", now, "fine")),
        minimal_blocks(call, "args.json"),
        home_view(
            HomeView(
                "U1",
                to_decide=(call,),
                waiting=(call,),
                allowances=(allowance,),
                policy="p",
            )
        ),
        reject_modal(LEDGER, ["Too risky"]),
        edit_modal(form),
        allow_modal(allow),
        feedback_blocks(SESSION),
        feedback_modal(FeedbackClick(SESSION, "bad", "1700000000.000100")),
        *_freeze_rendered(now),
    ]


def _freeze_rendered(now: datetime) -> list[Any]:
    """A frozen card offering "Break glass", its reason form, a decided card to review."""
    frozen = _call(frozen="freezes[0]", frozen_until=now, break_glass=True)
    glass = GlassInfo(LEDGER, "C1", "U2", "outage", "freezes[0]", now)
    return [
        approval_card(frozen),
        break_glass_modal(LEDGER, DIGEST),
        decided_card(_call(glass=glass), CardOutcome("approved", "U2", now, "break glass")),
    ]


def test_the_freeze_buttons_say_what_they_do_and_never_approve_reject_or_cancel() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    labels = {
        str(e["text"]["text"])
        for blocks in _freeze_rendered(now)[::2]
        for b in blocks
        if b.get("type") == "actions"
        for e in b["elements"]
    }
    new = labels - {"Reject", "Cancel run"}
    assert new == {"Break glass", "Mark reviewed"}
    assert not any(w in label.lower() for label in new for w in ("approve", "reject", "cancel"))


def _collect(node: Any, key: str, into: set[str]) -> set[str]:
    if isinstance(node, dict):
        for k, value in node.items():
            if k == key and isinstance(value, str):
                into.add(value)
            _collect(value, key, into)
    elif isinstance(node, list):
        for value in node:
            _collect(value, key, into)
    return into


def test_action_ids_are_the_shipped_ones() -> None:
    assert _collect(_rendered(), "action_id", set()) == ACTION_IDS


def test_callback_ids_are_the_shipped_ones() -> None:
    assert _collect(_rendered(), "callback_id", set()) == CALLBACK_IDS


def test_decision_block_ids_carry_digest_and_ledger_id() -> None:
    block_ids = _collect(_rendered(), "block_id", set())
    decision = {b for b in block_ids if b.startswith("opsgate_decision")}
    assert decision == {
        f"opsgate_decision:{DIGEST}",
        f"opsgate_decision:{DIGEST}:{LEDGER}",
        f"opsgate_decision:{DIGEST}.{PREVIEW_DIGEST}",  # a card with a preview
    }
    pattern = re.compile(
        r"^opsgate_decision:[0-9a-f]{1,64}(\.[0-9a-f]{1,64})?(:[0-9A-Za-z_-]{1,64})?$"
    )
    assert all(pattern.match(b) for b in decision)
    # The others: the reject modal's, and the edit modal's, which are argument names.
    assert block_ids - decision == FIXED_BLOCK_IDS | {"command", FEEDBACK_BLOCK}


def test_card_metadata_event_type() -> None:
    metadata = card_metadata(_call(locked="arguments_not_attached"))
    assert metadata == {
        "event_type": CARD_EVENT,
        "event_payload": {"ledger_id": LEDGER, "locked": "arguments_not_attached"},
    }


def test_queue_notice_metadata_event_type() -> None:
    """A notice posted by an older release is still found by its burst after an upgrade."""
    burst = "2026-01-01T00:00:00+00:00"
    assert queue_metadata(burst) == {"event_type": QUEUE_EVENT, "event_payload": {"burst": burst}}


def test_shortcut_and_slash_command_match_the_manifest() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    features = manifest["features"]
    assert [s["callback_id"] for s in features["shortcuts"]] == [SHORTCUT_ID]
    assert [c["command"] for c in features["slash_commands"]] == [SLASH_COMMAND]
    assert SHORTCUT == SHORTCUT_ID
    assert COMMAND == SLASH_COMMAND


def test_feedback_buttons_carry_the_shipped_values() -> None:
    [block] = feedback_blocks(SESSION)
    [element] = block["elements"]
    assert (block["type"], element["type"]) == ("context_actions", "feedback_buttons")
    shown = (element["positive_button"]["value"], element["negative_button"]["value"])
    assert shown == FEEDBACK_VALUES


def test_the_manifest_declares_the_agent_view_and_its_scope_and_events() -> None:
    """Slack's agent messaging experience: `agent_view` with its `agent_description` (new apps
    can no longer declare `assistant_view`), the Messages tab's opening (`app_home_opened`),
    the context (`app_context_changed`) and the DMs themselves (`message.im`)."""
    manifest = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    features = manifest["features"]
    assert "assistant_view" not in features
    description = features["agent_view"]["agent_description"]
    assert 0 < len(description) <= 300  # the manifest schema's limit
    assert set(features["agent_view"]) <= {"agent_description", "suggested_prompts", "actions"}
    assert "assistant:write" in manifest["oauth_config"]["scopes"]["bot"]
    events = manifest["settings"]["event_subscriptions"]["bot_events"]
    assert {"app_home_opened", "app_context_changed", "message.im"} <= set(events)
    assert not {"assistant_thread_started", "assistant_thread_context_changed"} & set(events)
    assert features["app_home"]["messages_tab_enabled"] is True
